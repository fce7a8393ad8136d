"""Where the timed runs happen: in this process (``local``) or on an Android phone over adb (``adb``).

Both return the same :class:`Measurement` per runtime, so the results have one schema
whatever the transport.

``local`` loads every runtime in this process and times them interleaved, round-robin
(:func:`~audiodeploy.bench.timing.time_interleaved`): ExecuTorch's Python runtime, which
also serves arm64 Linux boards and Apple-silicon Macs.

``adb`` pushes each .pte and its input to the phone and runs ExecuTorch's
``executor_runner`` there (built for arm64-v8a with XNNPACK, see the README), one runner
process per program, and parses the timings the runner logs. What it parses is the
runner's own log format (``examples/portable/executor_runner/executor_runner.cpp`` and
``runtime/platform/default/posix.cpp`` of ExecuTorch), quoted in the tests:

    I 00:00:00.125366 executorch:executor_runner.cpp:535] Model loaded in 118.204000 ms.
    I 00:00:01.332017 executorch:executor_runner.cpp:683] Iteration 1 of 12: 201.561000 ms
    I 00:00:03.751283 executorch:executor_runner.cpp:698] Model executed successfully 12 time(s) in 2425.301000 ms.

Runners built before the per-iteration line existed print only the last line; their
figures are then the mean over all executions, warm-up included, and the results say so.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.memory import PeakResident
from audiodeploy.bench.runtimes import ExecuTorchRuntime, Runtime
from audiodeploy.bench.timing import Runner, Timing, latency_dict, time_interleaved

Log = Callable[[str], None]


@dataclass(frozen=True)
class RunCounts:
    runs: int
    warmup: int


@dataclass
class Measurement:
    """One runtime on one input: load time, latency record, memory, and what the transport observed."""

    load_s: float | None
    latency: dict
    peak_rss_bytes: int | None = None
    output: torch.Tensor | None = None
    timing: Timing | None = None
    """The timed calls with their rounds, for paired ratios (local only)."""
    notes: list[str] = field(default_factory=list)


def _quiet(message: str) -> None:
    pass


class LocalTransport:
    """Every runtime in this process; each loaded once, then timed interleaved on each input."""

    kind = "local"
    programs_per_length = False
    """One program serves every length (the export's dynamic length axis)."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[float, int | None]] = {}

    def describe(self) -> dict:
        return {"kind": self.kind, "runtime": "ExecuTorch Python runtime (portable_lib) in the benchmarking process"}

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = _quiet,
    ) -> dict[str, Measurement]:
        for runtime in runtimes:
            if runtime.name not in self._loaded:
                log(f"loading {runtime.name}")
                with PeakResident() as memory:
                    start = time.perf_counter()
                    runtime.load()
                    load_s = time.perf_counter() - start
                self._loaded[runtime.name] = (load_s if runtime.loads else None, memory.retained)
        first: dict[str, tuple[torch.Tensor, int | None]] = {}
        for runtime in runtimes:
            log(f"first call: {runtime.name}")
            with PeakResident() as memory:
                output = runtime.run(inputs)
            retained = self._loaded[runtime.name][1]
            peak = None if retained is None or memory.extra is None else retained + memory.extra
            first[runtime.name] = (output, peak)
        runners = [
            Runner(r.name, _call(r, inputs), counts[r.name].runs, counts[r.name].warmup) for r in runtimes
        ]
        timings = time_interleaved(runners, progress=log)
        return {
            r.name: Measurement(
                load_s=self._loaded[r.name][0],
                latency=timings[r.name].to_dict(),
                peak_rss_bytes=first[r.name][1],
                output=first[r.name][0],
                timing=timings[r.name],
            )
            for r in runtimes
        }

    def close(self, runtimes: Sequence[Runtime]) -> None:
        for runtime in runtimes:
            runtime.unload()


def _call(runtime: Runtime, inputs: tuple[torch.Tensor, ...]) -> Callable[[], object]:
    return lambda: runtime.run(inputs)


# --- adb ----------------------------------------------------------------------------------------

REMOTE_DIR = "/data/local/tmp/audiodeploy-bench"

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
        if failures:
            reason = failures[-1]
        elif _ANY_LOG.search(text):
            reason = _last_line(text)
        else:
            reason = (
                f"{_last_line(text) or 'no output'} (no ExecuTorch log lines: build the runner with "
                "-DEXECUTORCH_ENABLE_LOGGING=ON and -DEXECUTORCH_PAL_DEFAULT=posix, see the README)"
            )
        raise BenchError(f"executor_runner did not complete on the device: {reason}")
    executions, total_ms = total
    ordered = [iterations[i] for i in sorted(iterations)]
    if ordered and len(ordered) != executions:
        raise BenchError(f"executor_runner logged {len(ordered)} of {executions} iteration times; its output was cut")
    return RunnerTimings(executions, total_ms, ordered, load_ms, threads)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def parse_device(spec: str) -> tuple[str, str | None]:
    """``local`` -> (local, None); ``adb`` -> (adb, None); ``adb:SERIAL`` -> (adb, SERIAL)."""
    if spec == "local":
        return "local", None
    if spec == "adb":
        return "adb", None
    if spec.startswith("adb:") and spec[4:].strip():
        return "adb", spec[4:].strip()
    raise BenchError(f"--device {spec!r}: give 'local', 'adb' or 'adb:SERIAL' (a serial from `adb devices`)")


class AdbTransport:
    """ExecuTorch's ``executor_runner`` on an Android phone, driven over adb.

    Each program runs in its own runner process: ``warmup + runs`` executions of the
    pushed input (the runner sizes a dynamic input to its upper bound, so programs for
    the phone are exported for one fixed length). Commands go through ``subprocess``
    to the ``adb`` found on PATH (or ``adb`` given), nothing else.
    """

    kind = "adb"
    programs_per_length = True

    def __init__(self, runner: Path, serial: str | None = None, adb: str = "adb", remote_dir: str = REMOTE_DIR):
        self.runner = runner
        self.serial = serial
        self.adb = adb
        self.remote_dir = remote_dir
        self.device: dict[str, str] = {}
        self._runner_pushed = False

    # Command construction (pure, tested without a phone).

    def adb_command(self, *args: str) -> list[str]:
        return [self.adb, *(["-s", self.serial] if self.serial else []), *args]

    def runner_command(
        self, program: str, input_file: str | None, executions: int, threads: int | None
    ) -> str:
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
        return self.runner.name

    def remote(self, name: str) -> str:
        return f"{self.remote_dir}/{name}"

    # Talking to the device.

    def _adb(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = self.adb_command(*args)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise BenchError(
                f"{self.adb}: not found on PATH; install Android platform-tools and connect the phone"
            ) from None
        except subprocess.TimeoutExpired:
            raise BenchError(f"`{shlex.join(command)}` did not finish in {timeout:.0f} s; is the device still connected?") from None
        if check and result.returncode != 0:
            raise BenchError(f"`{shlex.join(command)}` failed: {_last_line(result.stderr + result.stdout) or f'exit {result.returncode}'}")
        return result

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "serial": self.serial,
            "runner": str(self.runner),
            "remote_dir": self.remote_dir,
            "device": dict(self.device),
        }

    def connect(self) -> None:
        """Check, before anything slow, that the device answers and the runner exists."""
        if not self.runner.is_file():
            raise BenchError(
                f"--runner {self.runner}: no such file; build executor_runner for arm64-v8a with XNNPACK (see the README)"
            )
        state = self._adb("get-state", timeout=30, check=False)
        if state.returncode != 0 or state.stdout.strip() != "device":
            who = f"adb device {self.serial}" if self.serial else "adb device"
            reason = _last_line(state.stderr + state.stdout) or f"state {state.stdout.strip() or 'unknown'}"
            raise BenchError(f"{who} is not reachable ({reason}); check `adb devices` and USB debugging")
        for key, prop in (("model", "ro.product.model"), ("abi", "ro.product.cpu.abi"), ("android", "ro.build.version.release")):
            self.device[key] = self._adb("shell", "getprop", prop, timeout=30).stdout.strip()
        if self.device.get("abi") and self.device["abi"] != "arm64-v8a":
            raise BenchError(f"the device's ABI is {self.device['abi']}; the runner is built for arm64-v8a")

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
        log: Log = _quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        self._push_runner()
        results = {}
        with tempfile.TemporaryDirectory(prefix="audiodeploy-bench-") as scratch:
            input_names = []
            for i, tensor in enumerate(inputs):
                name = f"input{i}.bin"
                (Path(scratch) / name).write_bytes(tensor.contiguous().numpy().tobytes())
                self._push(Path(scratch) / name, name)
                input_names.append(name)
            for runtime in runtimes:
                if not isinstance(runtime, ExecuTorchRuntime):
                    raise BenchError(f"{runtime.name} cannot run on the phone: only ExecuTorch programs can")
                program = f"{runtime.name}.pte"
                (Path(scratch) / program).write_bytes(runtime.buffer)
                log(f"pushing {runtime.name} ({len(runtime.buffer) / 2**20:.1f} MiB)")
                self._push(Path(scratch) / program, program)
                n = counts[runtime.name]
                command = self.runner_command(program, ",".join(input_names), n.warmup + n.runs, threads)
                log(f"running {runtime.name} on the device: {command}")
                result = self._adb("shell", command, timeout=3600, check=False)
                output = result.stdout + "\n" + result.stderr
                timings = parse_runner_output(output)
                if result.returncode != 0:
                    raise BenchError(f"executor_runner exited with {result.returncode} on the device: {_last_line(output)}")
                results[runtime.name] = _measurement(timings, n)
                self._adb("shell", "rm", "-f", self.remote(program), check=False)
            for name in input_names:
                self._adb("shell", "rm", "-f", self.remote(name), check=False)
        return results

    def close(self, runtimes: Sequence[Runtime]) -> None:
        pass


def _measurement(timings: RunnerTimings, counts: RunCounts) -> Measurement:
    notes = []
    if timings.iterations_ms:
        seconds = [ms / 1e3 for ms in timings.iterations_ms[counts.warmup :]]
        latency = latency_dict(seconds, counts.warmup)
    else:
        mean = timings.total_ms / 1e3 / timings.executions
        latency = latency_dict([mean], 0)
        latency["runs"] = timings.executions
        notes.append(
            "the runner printed only its total time: latency is the mean of all executions, warm-up included"
        )
    if timings.threads is not None:
        notes.append(f"runner threadpool: {timings.threads} thread(s)")
    return Measurement(
        load_s=None if timings.load_ms is None else timings.load_ms / 1e3,
        latency=latency,
        notes=notes,
    )
