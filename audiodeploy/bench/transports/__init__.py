"""Where the timed runs happen. Every transport returns the same :class:`Measurement` per runtime, and the bench
compares every device's outputs with eager PyTorch on this machine, so a wrong result on arm64 is caught, not
only a slow one. One transport a module:

- ``local`` (:mod:`.local`): every runtime in this process, timed interleaved round-robin
  (:func:`~audiodeploy.bench.timing.time_interleaved`): ExecuTorch's Python runtime.
- ``native`` and ``qemu-aarch64`` (:mod:`.native`): the same, side by side with the project's C++ runner
  (``audiodeploy runner build``) on this machine, each ExecuTorch program appearing twice, ``NAME`` (Python)
  and ``NAME-native`` (the runner); or the linux-aarch64 runner under ``qemu-aarch64``, whose latency is
  emulated and says nothing about arm64 hardware, its outputs are what it checks.
- ``adb[:SERIAL]`` (:mod:`.adb`): an Android phone, the project's android-arm64 bundle pushed and run through
  its own loader; with ``--runner PATH`` (:mod:`.executor_runner`), ExecuTorch's NDK-built
  ``executor_runner`` instead, and the timings it logs parsed.
- ``ssh:[USER@]HOST[:PORT]`` (:mod:`.ssh`): an arm64 Linux board over ssh and scp.

adb and ssh share one implementation of the runner on another machine (:mod:`.remote`); every runner
transport measures its programs through one loop (:func:`.base.measure_programs`) and builds the project's
runner and reads its report the same way (:mod:`.project_runner`). ``--device`` is parsed in
:mod:`audiodeploy.bench.device`, which needs no torch.
"""

from audiodeploy.bench.device import DEVICE_CHOICES, RUNNER_DEVICES, SshDestination, parse_device
from audiodeploy.bench.transports.adb import REMOTE_DIR, AdbConnection, AdbRunnerTransport
from audiodeploy.bench.transports.base import Log, Measurement, RunCounts, Transport
from audiodeploy.bench.transports.executor_runner import AdbTransport, RunnerTimings, parse_runner_output
from audiodeploy.bench.transports.local import LocalTransport
from audiodeploy.bench.transports.native import NativeSideBySide, RunnerTransport
from audiodeploy.bench.transports.project_runner import EMULATED_NOTE, PEAK_RSS_NOTE
from audiodeploy.bench.transports.remote import RemoteRunnerTransport
from audiodeploy.bench.transports.ssh import SSH_OPTIONS_ENV, SshTransport

__all__ = [
    "DEVICE_CHOICES",
    "EMULATED_NOTE",
    "PEAK_RSS_NOTE",
    "REMOTE_DIR",
    "RUNNER_DEVICES",
    "SSH_OPTIONS_ENV",
    "AdbConnection",
    "AdbRunnerTransport",
    "AdbTransport",
    "LocalTransport",
    "Log",
    "Measurement",
    "NativeSideBySide",
    "RemoteRunnerTransport",
    "RunCounts",
    "RunnerTimings",
    "RunnerTransport",
    "SshDestination",
    "SshTransport",
    "Transport",
    "parse_device",
    "parse_runner_output",
]
