from audiodeploy.cli import main

main()
