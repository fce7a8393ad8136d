"""A stand-in for the ``adb`` binary that really runs what is pushed, installed on PATH by the tests.

No phone is reachable here, and this stands in for adb only: the runner, the android-arm64 bundle, the program
and every file are the real ones. A folder, ``$QEMU_ADB_PHONE``, stands in for the phone's file system (the
phone's ``/data/local/tmp/x`` is ``$QEMU_ADB_PHONE/data/local/tmp/x``), and:

- ``get-state`` prints ``device``; ``shell getprop`` answers for an arm64-v8a phone;
- ``push LOCAL... REMOTE`` and ``pull REMOTE LOCAL`` copy files and folders as adb does (into REMOTE/ when it
  ends with a slash or is a folder; a pulled folder lands inside an existing LOCAL folder);
- ``shell COMMAND`` runs COMMAND with ``/bin/sh`` in the phone folder after two rewrites: ``/data/local/tmp``
  becomes the phone folder, and the bundle's loader ``./ld-linux-aarch64.so.1`` is started as
  ``qemu-aarch64 ./ld-linux-aarch64.so.1`` (this machine is x86-64 and registers no binfmt handler), with an
  empty ``QEMU_LD_PREFIX`` so that nothing comes from the host's arm64 sysroot: the loader and every library
  must come from the pushed bundle, as on a phone. The CPU qemu emulates is the one the qemu-aarch64 device
  uses (``audiodeploy.native.tools.emulated_cpu``). The exit status is COMMAND's, as with adb's shell protocol.

Every invocation is appended to ``$QEMU_ADB_LOG`` as JSON. ``$QEMU_ADB_MODE=unreachable`` plays a phone that is
not attached.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from audiodeploy.native.tools import emulated_cpu

PHONE_TMP = "/data/local/tmp"
LOADER = "./ld-linux-aarch64.so.1 "

args = sys.argv[1:]
with open(os.environ["QEMU_ADB_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(args) + "\n")
phone = Path(os.environ["QEMU_ADB_PHONE"])
serial = None
if args[:1] == ["-s"]:
    serial, args = args[1], args[2:]

if os.environ.get("QEMU_ADB_MODE") == "unreachable":
    print(f"error: device '{serial}' not found" if serial else "error: no devices/emulators found", file=sys.stderr)
    sys.exit(1)


def on_phone(remote: str) -> Path:
    if not remote.startswith(PHONE_TMP + "/"):
        print(f"adb: error: stand-in only serves {PHONE_TMP}, not {remote}", file=sys.stderr)
        sys.exit(1)
    return phone / remote.lstrip("/")


def copy(source: Path, destination: Path, into: bool) -> None:
    target = destination / source.name if into else destination
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copy2(source, target)


command = args[0] if args else ""
if command == "get-state":
    print("device")
elif command == "shell" and args[1:2] == ["getprop"]:
    props = {
        "ro.product.model": "stand-in (qemu-aarch64)",
        "ro.product.cpu.abi": "arm64-v8a",
        "ro.build.version.release": "15",
    }
    print(props.get(args[2], ""))
elif command == "push":
    *sources, remote = args[1:]
    destination = on_phone(remote.rstrip("/"))
    into = remote.endswith("/") or destination.is_dir() or len(sources) > 1
    if into and not destination.is_dir():
        print(f"adb: error: failed to access '{remote}': No such file or directory", file=sys.stderr)
        sys.exit(1)
    for source in sources:
        copy(Path(source), destination, into)
    print(f"{len(sources)} file(s) pushed, 0 skipped.")
elif command == "pull":
    remote, local = args[1], Path(args[2])
    source = on_phone(remote.rstrip("/"))
    if not source.exists():
        print(f"adb: error: failed to stat remote object '{remote}': No such file or directory", file=sys.stderr)
        sys.exit(1)
    copy(source, local, local.is_dir())
    print("1 file(s) pulled, 0 skipped.")
elif command == "shell" and len(args) > 1:
    line = " ".join(args[1:]).replace(PHONE_TMP, str(phone / PHONE_TMP.lstrip("/")))
    qemu = shutil.which("qemu-aarch64")
    line = line.replace(LOADER, f"{qemu} {LOADER}")
    environment = dict(os.environ, QEMU_LD_PREFIX="", QEMU_CPU=emulated_cpu(qemu))
    done = subprocess.run(["/bin/sh", "-c", line], cwd=phone, env=environment)
    sys.exit(done.returncode)
else:
    print(f"stand-in adb: unexpected {args}", file=sys.stderr)
    sys.exit(1)
