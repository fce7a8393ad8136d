"""A stand-in for the ``adb`` binary, installed on PATH by the tests: no phone is reachable here.

It only plays the subprocess boundary: every invocation is appended to ``$FAKE_ADB_LOG`` as
JSON; ``push`` copies into ``$FAKE_ADB_DEVICE`` (the phone's /data/local/tmp) and into ``pushed/``
beside it; ``shell rm`` deletes on the fake device; ``shell`` with
an ``executor_runner`` command prints what the real runner logs (tests/bench/runner_logs.py)
for the ``--num_executions`` asked. ``$FAKE_ADB_MODE`` picks the scenario:
``ok`` (default), ``older`` (runner without per-iteration lines), ``unreachable``,
``method-fails`` (runner aborts), ``not-a-program``.
"""

import json
import os
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, os.environ["FAKE_ADB_HELPERS"])
import runner_logs

args = sys.argv[1:]
with open(os.environ["FAKE_ADB_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(args) + "\n")
mode = os.environ.get("FAKE_ADB_MODE", "ok")
device = Path(os.environ["FAKE_ADB_DEVICE"])
serial = None
if args[:1] == ["-s"]:
    serial, args = args[1], args[2:]

if mode == "unreachable":
    print(f"error: device '{serial}' not found" if serial else "error: no devices/emulators found", file=sys.stderr)
    sys.exit(1)

command = args[0]
if command == "get-state":
    print("device")
elif command == "push":
    local, remote = args[1], args[2]
    target = device / remote.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(local, target)
    history = device.parent / "pushed"  # what was pushed, kept after the transport cleans the device
    history.mkdir(exist_ok=True)
    shutil.copyfile(local, history / Path(remote).name)
    print(f"{local}: 1 file pushed, 0 skipped. 45.1 MB/s ({os.path.getsize(local)} bytes in 0.001s)")
elif command == "shell" and args[1] == "getprop":
    print({"ro.product.model": "Pixel 8", "ro.product.cpu.abi": "arm64-v8a", "ro.build.version.release": "15"}[args[2]])
elif command == "shell" and "--model_path=" in " ".join(args[1:]):
    line = " ".join(args[1:])
    model = re.search(r"--model_path=(\S+)", line)[1]
    executions = int(re.search(r"--num_executions=(\d+)", line)[1])
    if mode == "method-fails":
        sys.stderr.write(runner_logs.method_load_failure_log(model))
        sys.exit(134)
    if mode == "not-a-program":
        sys.stderr.write(runner_logs.parse_failure_log(model))
        sys.exit(1)
    times = [20.0 + 0.5 * i for i in range(executions)]
    if mode == "older":
        sys.stderr.write(runner_logs.older_runner_log(model, executions, sum(times)))
    else:
        sys.stderr.write(runner_logs.current_runner_log(model, times))
    print("OutputX 0: tensor(sizes=[1, 4], [0.1, 0.2, 0.3, 0.4])")
elif command == "shell" and args[1] == "rm":
    for path in args[3:]:
        (device / path.lstrip("/")).unlink(missing_ok=True)
elif command == "shell" and args[1] in ("mkdir", "chmod"):
    pass
else:
    print(f"fake adb: unexpected {args}", file=sys.stderr)
    sys.exit(1)
