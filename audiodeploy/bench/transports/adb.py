"""``--device adb[:SERIAL]``: an Android phone. The project's android-arm64 bundle (the runner, the wheel's
libraries and glibc's arm64 loader) is pushed to ``/data/local/tmp/audiodeploy-bench`` and run through its own
loader; its JSON report and outputs are pulled back. :class:`AdbConnection` is the ``adb`` both phone
transports talk through (this one, and ExecuTorch's ``executor_runner`` with ``--runner PATH``,
:mod:`~audiodeploy.bench.transports.executor_runner`)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import AdbRunnerTransportDescription, AndroidDevice
from audiodeploy.bench.transports.base import Log, last_line, quiet
from audiodeploy.bench.transports.project_runner import build_for_device
from audiodeploy.bench.transports.remote import RemoteRunnerTransport
from audiodeploy.native import BuiltRunner
from audiodeploy.native.run import RunnerCpu

REMOTE_DIR = "/data/local/tmp/audiodeploy-bench"


class AdbConnection:
    """The ``adb`` found on PATH (or `adb` given), for one device (`serial`, or the only one attached)."""

    def __init__(self, serial: str | None = None, adb: str = "adb") -> None:
        self.serial = serial
        self.adb = adb

    def command(self, *args: str) -> list[str]:
        """The adb command line for `args`, addressed to this device."""
        return [self.adb, *(["-s", self.serial] if self.serial else []), *args]

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``adb ARGS``; a missing adb, a timeout and (when `check`) a failure are one-line BenchErrors."""
        command = self.command(*args)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise BenchError(
                f"{self.adb}: not found on PATH; install Android platform-tools and connect the phone"
            ) from None
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"`{shlex.join(command)}` did not finish in {timeout:.0f} s; is the device still connected?"
            ) from None
        if check and result.returncode != 0:
            raise BenchError(
                f"`{shlex.join(command)}` failed: {last_line(result.stderr + result.stdout) or f'exit {result.returncode}'}"
            )
        return result

    def connect(self) -> dict[str, str]:
        """Check that the device answers and is arm64; its model, ABI and Android version."""
        state = self.run("get-state", timeout=30, check=False)
        if state.returncode != 0 or state.stdout.strip() != "device":
            who = f"adb device {self.serial}" if self.serial else "adb device"
            reason = last_line(state.stderr + state.stdout) or f"state {state.stdout.strip() or 'unknown'}"
            raise BenchError(f"{who} is not reachable ({reason}); check `adb devices` and USB debugging")
        device = {}
        for key, prop in (
            ("model", "ro.product.model"),
            ("abi", "ro.product.cpu.abi"),
            ("android", "ro.build.version.release"),
        ):
            device[key] = self.run("shell", "getprop", prop, timeout=30).stdout.strip()
        if device.get("abi") and device["abi"] != "arm64-v8a":
            raise BenchError(f"the device's ABI is {device['abi']}; the runner is built for arm64-v8a")
        return device

    def shell(self, command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `command` in ``adb shell``."""
        return self.run("shell", command, timeout=timeout, check=check)

    def push(self, files: Sequence[Path], remote_dir: str) -> None:
        """Copy `files` into the device's folder `remote_dir`."""
        self.run("push", *(str(f) for f in files), remote_dir + "/")

    def pull(self, remote: str, local_dir: Path) -> None:
        """Copy the device's `remote` into `local_dir`."""
        self.run("pull", remote, str(local_dir))


def android_device(device: dict[str, str], cpu: RunnerCpu | None = None) -> AndroidDevice | None:
    """What the record says of the phone (`AdbConnection.connect`); None before it was asked."""
    if not device:
        return None
    return AndroidDevice(model=device["model"], abi=device["abi"], android=device["android"], cpu=cpu)


class AdbRunnerTransport(RemoteRunnerTransport):
    """``--device adb[:SERIAL]`` without ``--runner``: the project's android-arm64 bundle (``audiodeploy runner
    build --target android-arm64``: the runner, the wheel's libraries, glibc's arm64 loader and libraries; no
    NDK) pushed to ``/data/local/tmp/audiodeploy-bench`` and started through its own loader, since Android
    has no glibc::

        cd /data/local/tmp/audiodeploy-bench && ./ld-linux-aarch64.so.1 --library-path . ./audiodeploy-runner ...

    The folder is removed when the bench ends.
    """

    kind = "adb"
    launcher = ("./ld-linux-aarch64.so.1", "--library-path", ".", "./audiodeploy-runner")

    def __init__(self, built: BuiltRunner, serial: str | None = None, adb: str = "adb", remote_dir: str = REMOTE_DIR):
        super().__init__()
        self.built = built
        self.connection = AdbConnection(serial, adb)
        self.bundle_dir = remote_dir
        self.where = f"adb device {serial}" if serial else "the adb device"

    @classmethod
    def for_device(cls, serial: str | None, log: Log = quiet, adb: str = "adb") -> AdbRunnerTransport:
        """Check the phone first (fast), then build or take the bundle from the cache."""
        connection = AdbConnection(serial, adb)
        device = connection.connect()
        transport = cls(build_for_device("android-arm64", "adb", log), serial, adb)
        transport.device.update(device)
        return transport

    @property
    def serial(self) -> str | None:
        """The device's serial; None for the only one attached."""
        return self.connection.serial

    def describe(self) -> AdbRunnerTransportDescription:
        return AdbRunnerTransportDescription(
            kind="adb",
            serial=self.serial,
            runtime="audiodeploy-runner android-arm64 bundle (C++, ExecuTorch runtime from the aarch64 executorch wheel, glibc loader)",
            target=self.built.target,
            runner=str(self.built.directory),
            executorch=self.built.executorch_version,
            remote_dir=self.bundle_dir,
            device=android_device(self.device, self.cpu),
        )

    def _shell(self, command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.connection.shell(command, timeout=timeout, check=check)

    def _push(self, files: Sequence[Path], remote_dir: str) -> None:
        self.connection.push(files, remote_dir)

    def _pull(self, remote: str, local_dir: Path) -> None:
        self.connection.pull(remote, local_dir)

    def _make_remote_dir(self) -> str:
        # A folder left by an interrupted run is replaced, not mixed with.
        self._shell(f"rm -rf {shlex.quote(self.bundle_dir)} && mkdir -p {shlex.quote(self.bundle_dir)}")
        return self.bundle_dir
