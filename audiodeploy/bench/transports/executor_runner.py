"""``--device adb[:SERIAL] --runner PATH``: ExecuTorch's own NDK-built ``executor_runner`` pushed to the phone
instead of the project's bundle, and the timings it logs parsed (:func:`parse_runner_output`).

What ``executor_runner`` logs is parsed from its own format (``examples/portable/executor_runner/
executor_runner.cpp`` and ``runtime/platform/default/posix.cpp`` of ExecuTorch), quoted in the tests:

    I 00:00:00.125366 executorch:executor_runner.cpp:535] Model loaded in 118.204000 ms.
    I 00:00:01.332017 executorch:executor_runner.cpp:683] Iteration 1 of 12: 201.561000 ms
    I 00:00:03.751283 executorch:executor_runner.cpp:698] Model executed successfully 12 time(s) in 2425.301000 ms.

Runners built before the per-iteration line existed print only the last line; their
figures are then the mean over all executions, warm-up included, and the results say so.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import ExecutorRunnerTransportDescription, Latency
from audiodeploy.bench.runtimes import ExecuTorchRuntime, Runtime
from audiodeploy.bench.transports.adb import REMOTE_DIR, AdbConnection, android_device
from audiodeploy.bench.transports.base import (
    SCRATCH_PREFIX,
    Log,
    Measurement,
    RunCounts,
    Transport,
    last_line,
    measure_programs,
    quiet,
)

_LOG_PREFIX = r"(?:[DIEF] \d+:\d{2}:\d{2}\.\d+ executorch:[^\]]*\] )?"
_LOADED = re.compile(_LOG_PREFIX + r"Model loaded in (?P<ms>[0-9.]+) ms\.")
_ITERATION = re.compile(_LOG_PREFIX + r"Iteration (?P<i>\d+) of (?P<n>\d+): (?P<ms>[0-9.]+) ms")
_TOTAL = re.compile(_LOG_PREFIX + r"Model executed successfully (?P<n>\d+) time\(s\) in (?P<ms>[0-9.]+) ms\.")
_THREADS = re.compile(_LOG_PREFIX + r"Resetting threadpool with num threads = (?P<n>-?\d+)")
_ANY_LOG = re.compile(r"(?:^|\n)[DIEF] \d+:\d{2}:\d{2}\.\d+ executorch:|ExecuTorch: ")
_FAILURE = re.compile(r"^(?:[EF] \d+:\d{2}:\d{2}\.\d+ executorch:[^\]]*\] )(?P<message>.*)$")


@dataclass
class RunnerTimings:
    """What one ``executor_runner`` process reported."""

    executions: int
    total_ms: float
    iterations_ms: list[float]
    """Per-execution times in order; empty when the runner prints only its total."""
    load_ms: float | None
    threads: int | None


def parse_runner_output(text: str) -> RunnerTimings:
    """Timings from ``executor_runner``'s log (stderr with the posix PAL, or logcat's messages).

    Raises :class:`BenchError` naming the runner's own error when it did not complete.
    """
    total = None
    iterations: dict[int, float] = {}
    load_ms = threads = None
    failures = []
    for line in text.splitlines():
        line = line.strip()
        if m := _TOTAL.search(line):
            total = (int(m["n"]), float(m["ms"]))
        elif m := _ITERATION.search(line):
            iterations[int(m["i"])] = float(m["ms"])
        elif m := _LOADED.search(line):
            load_ms = float(m["ms"])
        elif m := _THREADS.search(line):
            threads = int(m["n"])
        elif m := _FAILURE.match(line):
            failures.append(m["message"])
    if total is None:
        raise BenchError(f"executor_runner did not complete on the device: {_failure_reason(text, failures)}")
    executions, total_ms = total
    ordered = [iterations[i] for i in sorted(iterations)]
    if ordered and len(ordered) != executions:
        raise BenchError(f"executor_runner logged {len(ordered)} of {executions} iteration times; its output was cut")
    return RunnerTimings(executions, total_ms, ordered, load_ms, threads)


def _failure_reason(text: str, failures: list[str]) -> str:
    """Why a runner that logged no total did not complete: its last error line, else its last line; with no
    ExecuTorch log line at all, how to build a runner that logs."""
    if failures:
        return failures[-1]
    if _ANY_LOG.search(text):
        return last_line(text)
    return (
        f"{last_line(text) or 'no output'} (no ExecuTorch log lines: build the runner with "
        "-DEXECUTORCH_ENABLE_LOGGING=ON and -DEXECUTORCH_PAL_DEFAULT=posix, see the README)"
    )


def log_measurement(timings: RunnerTimings, counts: RunCounts) -> Measurement:
    """A Measurement from the runner's log: the iterations after the `counts.warmup` first, or, from a runner
    that logged only its total, the mean of all executions, with a note saying so."""
    notes = []
    if timings.iterations_ms:
        seconds = [ms / 1e3 for ms in timings.iterations_ms[counts.warmup :]]
        latency = Latency.of(seconds, counts.warmup)
    else:
        mean = timings.total_ms / 1e3 / timings.executions
        latency = dataclasses.replace(Latency.of([mean], 0), runs=timings.executions)
        notes.append("the runner printed only its total time: latency is the mean of all executions, warm-up included")
    if timings.threads is not None:
        notes.append(f"runner threadpool: {timings.threads} thread(s)")
    return Measurement(
        load_s=None if timings.load_ms is None else timings.load_ms / 1e3,
        latency=latency,
        notes=notes,
    )


class AdbTransport(Transport):
    """ExecuTorch's ``executor_runner`` (``--runner PATH``, built with the NDK) on an Android phone, over adb.

    Each program runs in its own runner process: ``warmup + runs`` executions of the
    pushed input (the runner sizes a dynamic input to its upper bound, so programs for
    the phone are exported for one fixed length). Its outputs are not read back (it only
    prints them), so nothing is compared with eager; the project's bundle
    (:class:`~audiodeploy.bench.transports.adb.AdbRunnerTransport`, the default) does compare.
    """

    kind = "adb"
    programs_per_length = True

    def __init__(self, runner: Path, serial: str | None = None, adb: str = "adb", remote_dir: str = REMOTE_DIR):
        self.runner = runner
        self.connection = AdbConnection(serial, adb)
        self.remote_dir = remote_dir
        self.device: dict[str, str] = {}
        self._runner_pushed = False

    @property
    def serial(self) -> str | None:
        """The device's serial; None for the only one attached."""
        return self.connection.serial

    # Command construction (pure, tested without a phone).

    def adb_command(self, *args: str) -> list[str]:
        """The adb command line for `args`, addressed to this device."""
        return self.connection.command(*args)

    def runner_command(self, program: str, input_file: str | None, executions: int, threads: int | None) -> str:
        """The shell command run on the device, for ``adb shell``."""
        flags = [f"--model_path={self.remote(program)}", f"--num_executions={executions}"]
        if input_file is not None:
            flags.append(f"--inputs={self.remote(input_file)}")
        if threads is not None:
            flags.append(f"--cpu_threads={threads}")
        runner = self.remote(self.runner_name)
        return f"cd {shlex.quote(self.remote_dir)} && {shlex.join([runner, *flags])}"

    @property
    def runner_name(self) -> str:
        """The runner's file name, on the device as here."""
        return self.runner.name

    def remote(self, name: str) -> str:
        """The device's path of file `name` in the transport's folder."""
        return f"{self.remote_dir}/{name}"

    # Talking to the device.

    def _adb(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.connection.run(*args, timeout=timeout, check=check)

    def describe(self) -> ExecutorRunnerTransportDescription:
        return ExecutorRunnerTransportDescription(
            kind="adb",
            serial=self.serial,
            runner=str(self.runner),
            remote_dir=self.remote_dir,
            device=android_device(self.device),
        )

    def connect(self) -> None:
        """Check, before anything slow, that the device answers and the runner exists."""
        if not self.runner.is_file():
            raise BenchError(
                f"--runner {self.runner}: no such file; build executor_runner for arm64-v8a with XNNPACK (see the README)"
            )
        self.device = self.connection.connect()

    def _push(self, local: Path, name: str) -> None:
        self._adb("push", str(local), self.remote(name))

    def _push_runner(self) -> None:
        if not self._runner_pushed:
            self._adb("shell", "mkdir", "-p", self.remote_dir)
            self._push(self.runner, self.runner_name)
            self._adb("shell", "chmod", "755", self.remote(self.runner_name))
            self._runner_pushed = True

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        self._push_runner()
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
            input_names = []
            for i, tensor in enumerate(inputs):
                name = f"input{i}.bin"
                (Path(scratch) / name).write_bytes(tensor.contiguous().numpy().tobytes())
                self._push(Path(scratch) / name, name)
                input_names.append(name)
            measure_program = partial(
                self._measure_program, scratch=Path(scratch), input_names=input_names, threads=threads, log=log
            )
            results = measure_programs(runtimes, counts, "on the phone", measure_program)
            for name in input_names:
                self._adb("shell", "rm", "-f", self.remote(name), check=False)
        return results

    def _measure_program(
        self,
        runtime: ExecuTorchRuntime,
        counts: RunCounts,
        *,
        scratch: Path,
        input_names: list[str],
        threads: int | None,
        log: Log,
    ) -> Measurement:
        """Push one program beside the inputs, run it in one runner process, parse its log, remove it."""
        program = f"{runtime.name}.pte"
        (scratch / program).write_bytes(runtime.buffer)
        log(f"pushing {runtime.name} ({len(runtime.buffer) / 2**20:.1f} MiB)")
        self._push(scratch / program, program)
        command = self.runner_command(program, ",".join(input_names), counts.warmup + counts.runs, threads)
        log(f"running {runtime.name} on the device: {command}")
        result = self._adb("shell", command, timeout=3600, check=False)
        output = result.stdout + "\n" + result.stderr
        timings = parse_runner_output(output)
        if result.returncode != 0:
            raise BenchError(f"executor_runner exited with {result.returncode} on the device: {last_line(output)}")
        measurement = log_measurement(timings, counts)
        self._adb("shell", "rm", "-f", self.remote(program), check=False)
        return measurement
