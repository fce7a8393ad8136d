"""Where the timed runs happen. Every transport returns the same :class:`Measurement` per runtime, and the bench
compares every device's outputs with eager PyTorch on this machine, so a wrong result on arm64 is caught, not
only a slow one.

- ``local``: every runtime in this process, timed interleaved round-robin
  (:func:`~audiodeploy.bench.timing.time_interleaved`): ExecuTorch's Python runtime.
- ``native``: the same, side by side with the project's C++ runner (``audiodeploy runner build``) on this
  machine; each ExecuTorch program appears twice, ``NAME`` (Python) and ``NAME-native`` (the runner).
- ``qemu-aarch64``: the linux-aarch64 runner under ``qemu-aarch64`` here; its latency is emulated and says
  nothing about arm64 hardware, its outputs are what it checks.
- ``adb[:SERIAL]``: an Android phone. By default the project's android-arm64 bundle (the runner, the wheel's
  libraries and glibc's arm64 loader) is pushed to ``/data/local/tmp/audiodeploy-bench`` and run through its
  own loader; its JSON report and outputs are pulled back. With ``--runner PATH``, ExecuTorch's NDK-built
  ``executor_runner`` is pushed instead and the timings it logs are parsed (below).
- ``ssh:[USER@]HOST[:PORT]``: an arm64 Linux board (Raspberry Pi, Jetson, Graviton): the linux-aarch64 runner
  folder and the program go over scp, the runner runs over ssh, its report and outputs come back over scp.

The remote runners write one JSON report (schema ``audiodeploy.runner/1``) and their outputs as raw files
(:mod:`audiodeploy.native.run`), so adb and ssh share one implementation (:class:`RemoteRunnerTransport`) and
differ only in how files and commands travel.

What ``executor_runner`` logs is parsed from its own format (``examples/portable/executor_runner/
executor_runner.cpp`` and ``runtime/platform/default/posix.cpp`` of ExecuTorch), quoted in the tests:

    I 00:00:00.125366 executorch:executor_runner.cpp:535] Model loaded in 118.204000 ms.
    I 00:00:01.332017 executorch:executor_runner.cpp:683] Iteration 1 of 12: 201.561000 ms
    I 00:00:03.751283 executorch:executor_runner.cpp:698] Model executed successfully 12 time(s) in 2425.301000 ms.

Runners built before the per-iteration line existed print only the last line; their
figures are then the mean over all executions, warm-up included, and the results say so.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.memory import PeakResident
from audiodeploy.bench.results import NATIVE_SUFFIX
from audiodeploy.bench.runtimes import ExecuTorchRuntime, Runtime
from audiodeploy.bench.timing import Runner, Timing, latency_dict, time_interleaved
from audiodeploy.native import (
    BuiltRunner,
    NativeError,
    NativeRun,
    RunOptions,
    build_runner,
    is_emulated,
    parse_report,
    read_outputs,
    run_runner,
    runner_arguments,
    runner_error_line,
    write_inputs,
)

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


class Transport:
    """What every transport offers the bench: ``describe()``, ``runtime_infos()``, ``measure()``, ``close()``."""

    kind: str
    programs_per_length = False
    """True when one program per input length is needed (a runner that cannot resize inputs)."""

    def describe(self) -> dict:
        raise NotImplementedError

    def runtime_infos(self, runtimes: Sequence[Runtime]) -> dict[str, dict]:
        """The record's ``runtimes``: one entry per name that :meth:`measure` returns."""
        return {runtime.name: runtime.info.to_dict() for runtime in runtimes}

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = _quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        raise NotImplementedError

    def close(self, runtimes: Sequence[Runtime]) -> None:
        pass


class LocalTransport(Transport):
    """Every runtime in this process; each loaded once, then timed interleaved on each input."""

    kind = "local"
    programs_per_length = False
    """One program serves every length (the export's dynamic length axis)."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[float | None, int | None]] = {}

    def describe(self) -> dict:
        return {"kind": self.kind, "runtime": "ExecuTorch Python runtime (portable_lib) in the benchmarking process"}

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = _quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        """`threads` is ignored: the process-wide count was set before anything loaded (timing.set_threads)."""
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
        runners = [Runner(r.name, _call(r, inputs), counts[r.name].runs, counts[r.name].warmup) for r in runtimes]
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


# --- executor_runner's log (--device adb --runner PATH) ----------------------------------------

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


# --- --device ------------------------------------------------------------------------------------

RUNNER_DEVICES = {"native": "host", "qemu-aarch64": "linux-aarch64"}
"""--device -> the runner build it runs on this machine (audiodeploy.native)."""

DEVICE_CHOICES = "'local', 'native', 'qemu-aarch64', 'adb', 'adb:SERIAL' or 'ssh:[USER@]HOST[:PORT]'"


@dataclass(frozen=True)
class SshDestination:
    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> SshDestination:
        """``[USER@]HOST[:PORT]``; a host or user that ssh would read as an option is refused."""
        user, at, host = text.rpartition("@")
        port = None
        if host.count(":") == 1:
            host, _, port_text = host.partition(":")
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise BenchError(f"--device ssh:{text}: the port {port_text!r} is not a number from 1 to 65535")
            port = int(port_text)
        if (
            not host
            or host.startswith("-")
            or (at and (not user or user.startswith("-") or "@" in user))
            or any(c.isspace() for c in text)
        ):
            raise BenchError(f"--device ssh:{text}: give ssh:[USER@]HOST[:PORT], e.g. ssh:pi@raspberrypi.local")
        return cls(host, user or None, port)

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return self.target + (f":{self.port}" if self.port else "")


def parse_device(spec: str) -> tuple[str, str | None]:
    """``local``, ``native``, ``qemu-aarch64`` -> (the same, None); ``adb`` -> (adb, None); ``adb:SERIAL`` ->
    (adb, SERIAL); ``ssh:[USER@]HOST[:PORT]`` -> (ssh, the destination, checked)."""
    if spec in ("local", *RUNNER_DEVICES):
        return spec, None
    if spec == "adb":
        return "adb", None
    if spec.startswith("adb:") and spec[4:].strip():
        return "adb", spec[4:].strip()
    if spec.startswith("ssh:") and spec[4:].strip():
        return "ssh", str(SshDestination.parse(spec[4:].strip()))
    raise BenchError(f"--device {spec!r}: give {DEVICE_CHOICES} (a serial from `adb devices`)")


# --- adb: the connection both phone transports use ------------------------------------------------

REMOTE_DIR = "/data/local/tmp/audiodeploy-bench"


class AdbConnection:
    """The ``adb`` found on PATH (or `adb` given), for one device (`serial`, or the only one attached)."""

    def __init__(self, serial: str | None = None, adb: str = "adb") -> None:
        self.serial = serial
        self.adb = adb

    def command(self, *args: str) -> list[str]:
        return [self.adb, *(["-s", self.serial] if self.serial else []), *args]

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
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
                f"`{shlex.join(command)}` failed: {_last_line(result.stderr + result.stdout) or f'exit {result.returncode}'}"
            )
        return result

    def connect(self) -> dict[str, str]:
        """Check that the device answers and is arm64; its model, ABI and Android version."""
        state = self.run("get-state", timeout=30, check=False)
        if state.returncode != 0 or state.stdout.strip() != "device":
            who = f"adb device {self.serial}" if self.serial else "adb device"
            reason = _last_line(state.stderr + state.stdout) or f"state {state.stdout.strip() or 'unknown'}"
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
        return self.run("shell", command, timeout=timeout, check=check)

    def push(self, files: Sequence[Path], remote_dir: str) -> None:
        self.run("push", *(str(f) for f in files), remote_dir + "/")

    def pull(self, remote: str, local_dir: Path) -> None:
        self.run("pull", remote, str(local_dir))


class AdbTransport(Transport):
    """ExecuTorch's ``executor_runner`` (``--runner PATH``, built with the NDK) on an Android phone, over adb.

    Each program runs in its own runner process: ``warmup + runs`` executions of the
    pushed input (the runner sizes a dynamic input to its upper bound, so programs for
    the phone are exported for one fixed length). Its outputs are not read back (it only
    prints them), so nothing is compared with eager; the project's bundle
    (:class:`AdbRunnerTransport`, the default) does compare.
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
        return self.connection.serial

    # Command construction (pure, tested without a phone).

    def adb_command(self, *args: str) -> list[str]:
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
        return self.runner.name

    def remote(self, name: str) -> str:
        return f"{self.remote_dir}/{name}"

    # Talking to the device.

    def _adb(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.connection.run(*args, timeout=timeout, check=check)

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
                    raise BenchError(
                        f"executor_runner exited with {result.returncode} on the device: {_last_line(output)}"
                    )
                results[runtime.name] = _measurement(timings, n)
                self._adb("shell", "rm", "-f", self.remote(program), check=False)
            for name in input_names:
                self._adb("shell", "rm", "-f", self.remote(name), check=False)
        return results


def _measurement(timings: RunnerTimings, counts: RunCounts) -> Measurement:
    notes = []
    if timings.iterations_ms:
        seconds = [ms / 1e3 for ms in timings.iterations_ms[counts.warmup :]]
        latency = latency_dict(seconds, counts.warmup)
    else:
        mean = timings.total_ms / 1e3 / timings.executions
        latency = latency_dict([mean], 0)
        latency["runs"] = timings.executions
        notes.append("the runner printed only its total time: latency is the mean of all executions, warm-up included")
    if timings.threads is not None:
        notes.append(f"runner threadpool: {timings.threads} thread(s)")
    return Measurement(
        load_s=None if timings.load_ms is None else timings.load_ms / 1e3,
        latency=latency,
        notes=notes,
    )


# --- the project's runner: shared pieces ----------------------------------------------------------

PEAK_RSS_NOTE = "peak_rss_bytes: the runner process's peak resident memory, the whole process (getrusage)"
EMULATED_NOTE = "emulated arm64 (qemu-aarch64): the latency is not an arm64 measurement; the output is checked"


def _runner_measurement(run: NativeRun, counts: RunCounts, emulated: bool = False) -> Measurement:
    """A Measurement from the runner's report (``warmup`` untimed runs were made before its latencies)."""
    notes = [f"runner threadpool: {run.report['threads']} thread(s)", PEAK_RSS_NOTE]
    if emulated:
        notes.insert(0, EMULATED_NOTE + (f" (qemu -cpu {run.emulated_cpu})" if run.emulated_cpu else ""))
    return Measurement(
        load_s=run.report["load_ms"]["total"] / 1e3,
        latency=latency_dict([ms / 1e3 for ms in run.latencies_ms], counts.warmup),
        peak_rss_bytes=run.report["peak_rss_bytes"],
        output=run.outputs[0] if run.outputs else None,
        notes=notes,
    )


def _run_options(counts: RunCounts, threads: int | None) -> RunOptions:
    return RunOptions(warmup=counts.warmup, iterations=counts.runs, threads=threads or 0)


def _executorch_only(runtime: Runtime, where: str) -> ExecuTorchRuntime:
    if not isinstance(runtime, ExecuTorchRuntime):
        raise BenchError(f"{runtime.name} cannot run {where}: only ExecuTorch programs can")
    return runtime


def _build(target: str, device: str, log: Log) -> BuiltRunner:
    try:
        return build_runner(target, log=log)  # type: ignore[arg-type]
    except NativeError as error:
        raise BenchError(f"--device {device}: {error}") from None


# --- the runner on this machine: native, qemu-aarch64 ---------------------------------------------


class RunnerTransport(Transport):
    """The project's C++ runner (``audiodeploy runner build``) started as a process on this machine: the host
    build, or the linux-aarch64 build under ``qemu-aarch64``, whose latency is emulated and says nothing about
    arm64 hardware; its outputs are what it checks, compared with eager like every transport's.

    Each program runs in one runner process: ``warmup + runs`` executions of the same inputs, given at their
    shapes (the runner takes any length up to the program's bound, so one program serves every length).
    """

    programs_per_length = False

    def __init__(self, device: str, built: BuiltRunner) -> None:
        self.kind = device
        self.built = built
        self.emulated = is_emulated(built)
        self._cpu: dict | None = None
        self._emulated_cpu: str | None = None

    @classmethod
    def for_device(cls, device: str, log: Log = _quiet) -> RunnerTransport:
        """Build (or take from the cache) the runner that `device` needs; a missing tool is a BenchError."""
        return cls(device, _build(RUNNER_DEVICES[device], device, log))

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "runtime": "audiodeploy-runner (C++, ExecuTorch runtime from the executorch wheel)",
            "target": self.built.target,
            "runner": str(self.built.directory),
            "executorch": self.built.executorch_version,
            "emulated": self.emulated,
            **({"emulated_cpu": self._emulated_cpu} if self._emulated_cpu else {}),
            "device": dict(self._cpu or {}),
        }

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = _quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        results = {}
        with tempfile.TemporaryDirectory(prefix="audiodeploy-bench-") as scratch:
            for runtime in runtimes:
                program = Path(scratch) / f"{runtime.name}.pte"
                program.write_bytes(_executorch_only(runtime, "in the native runner").buffer)
                n = counts[runtime.name]
                log(
                    f"running {runtime.name} in the {self.built.target} runner"
                    + (" (emulated)" if self.emulated else "")
                )
                try:
                    run = run_runner(self.built, program, list(inputs), _run_options(n, threads))
                except NativeError as error:
                    raise BenchError(f"{runtime.name} on --device {self.kind}: {error}") from None
                self._cpu = dict(run.report["cpu"])
                self._emulated_cpu = run.emulated_cpu
                results[runtime.name] = _runner_measurement(run, n, self.emulated)
        return results


class NativeSideBySide(Transport):
    """``--device native``: every runtime in this process (:class:`LocalTransport`), then each ExecuTorch
    program again in the host runner (:class:`RunnerTransport`) as ``NAME-native``, with the same thread count,
    so one record shows the Python runtime and the native runner side by side (ratio
    ``audiodeploy/audiodeploy-native``). The two are not interleaved: the runner runs after the in-process
    rounds, in its own process."""

    kind = "native"
    programs_per_length = False

    def __init__(self, local: LocalTransport, native: RunnerTransport) -> None:
        self.local = local
        self.native = native

    @classmethod
    def for_device(cls, log: Log = _quiet) -> NativeSideBySide:
        return cls(LocalTransport(), RunnerTransport.for_device("native", log))

    def describe(self) -> dict:
        described = self.native.describe()
        described["runtime"] = (
            "ExecuTorch Python runtime (portable_lib) in the benchmarking process, and each ExecuTorch program again "
            f"as NAME{NATIVE_SUFFIX} in audiodeploy-runner (C++, ExecuTorch runtime from the executorch wheel)"
        )
        return described

    def runtime_infos(self, runtimes: Sequence[Runtime]) -> dict[str, dict]:
        infos = {}
        for runtime in runtimes:
            info = runtime.info.to_dict()
            infos[runtime.name] = info
            if isinstance(runtime, ExecuTorchRuntime):
                infos[runtime.name + NATIVE_SUFFIX] = {
                    **info,
                    "name": runtime.name + NATIVE_SUFFIX,
                    "label": f"{info['label']}, in the native runner (audiodeploy-runner, C++)",
                    "notes": [
                        *info["notes"],
                        f"the same program as {runtime.name}, run by audiodeploy-runner in its own process",
                    ],
                }
        return infos

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = _quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        local = self.local.measure(runtimes, inputs, counts, log)
        programs = [r for r in runtimes if isinstance(r, ExecuTorchRuntime)]
        native = self.native.measure(programs, inputs, counts, log, threads=threads)
        results = {}
        for runtime in runtimes:
            results[runtime.name] = local[runtime.name]
            if runtime.name in native:
                results[runtime.name + NATIVE_SUFFIX] = native[runtime.name]
        return results

    def close(self, runtimes: Sequence[Runtime]) -> None:
        self.local.close(runtimes)


# --- the runner on another machine: adb (the Android bundle), ssh (a board) ------------------------

_EXIT_MARKER = "audiodeploy-runner-exit="
_EXIT = re.compile(re.escape(_EXIT_MARKER) + r"(\d+)\s*$", re.MULTILINE)


class RemoteRunnerTransport(Transport):
    """The project's runner on another machine, run in a folder there that holds the runner (copied once) and,
    per program, a subfolder with the program and its inputs::

        REMOTE/audiodeploy-runner, lib*.so [, ld-linux-aarch64.so.1, libc.so.6, ...]
        REMOTE/NAME/model.pte, input_0.bin          pushed
        REMOTE/NAME/report.json, outputs/           written by the runner, pulled back whole

    The runner's exit status comes back on stdout (``audiodeploy-runner-exit=N``), since adb without its
    shell protocol drops it; its one ``error:`` line comes back on stderr (or stdout, merged by old adb).
    Subclasses say how commands and files travel (:meth:`_shell`, :meth:`_push`, :meth:`_pull`), where the
    folder is (:meth:`_make_remote_dir`) and how the runner starts (:attr:`launcher`).
    """

    programs_per_length = False
    launcher: tuple[str, ...] = ("./audiodeploy-runner",)
    built: BuiltRunner
    where: str
    """How messages name the device: 'adb device SERIAL', 'ssh pi@board'."""

    def __init__(self) -> None:
        self.device: dict = {}
        self.remote_dir: str | None = None

    # What a subclass provides.

    def _shell(self, command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError

    def _push(self, files: Sequence[Path], remote_dir: str) -> None:
        raise NotImplementedError

    def _pull(self, remote: str, local_dir: Path) -> None:
        raise NotImplementedError

    def _make_remote_dir(self) -> str:
        raise NotImplementedError

    # Shared.

    def _runner_files(self) -> list[Path]:
        return sorted(p for p in self.built.directory.iterdir() if p.is_file() and not p.name.startswith("."))

    def _install_runner(self, log: Log) -> str:
        if self.remote_dir is None:
            files = self._runner_files()
            size = sum(p.stat().st_size for p in files) / 2**20
            remote_dir = self._make_remote_dir()
            self.remote_dir = remote_dir  # from here on, close() removes it
            log(
                f"copying the {self.built.target} runner ({len(files)} files, {size:.1f} MiB) to {self.where}:{remote_dir}"
            )
            self._push(files, remote_dir)
            executables = [
                shlex.quote(name)
                for name in ("audiodeploy-runner", "ld-linux-aarch64.so.1")
                if any(p.name == name for p in files)
            ]
            self._shell(f"cd {shlex.quote(remote_dir)} && chmod 755 {' '.join(executables)}")
        return self.remote_dir

    def script(self, name: str, arguments: Sequence[str]) -> str:
        """The shell command that runs the runner for program folder `name` (relative paths, from REMOTE)."""
        assert self.remote_dir is not None
        command = shlex.join([*self.launcher, *arguments])
        return f"cd {shlex.quote(self.remote_dir)} && {command} >{shlex.quote(name)}/report.json; echo {_EXIT_MARKER}$?"

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = _quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        remote_dir = self._install_runner(log)
        results = {}
        with tempfile.TemporaryDirectory(prefix="audiodeploy-bench-") as scratch:
            local = Path(scratch)
            (local / "inputs").mkdir()
            input_files = write_inputs(inputs, local / "inputs")
            for runtime in runtimes:
                buffer = _executorch_only(runtime, f"in the runner on {self.where}").buffer
                name = runtime.name
                folder = f"{remote_dir}/{name}"
                program = local / "model.pte"
                program.write_bytes(buffer)
                n = counts[name]
                log(f"pushing {name} ({len(buffer) / 2**20:.1f} MiB) to {self.where}")
                self._shell(f"mkdir -p {shlex.quote(folder)}")
                self._push([program, *(path for path, _ in input_files)], folder)
                arguments = runner_arguments(
                    f"{name}/model.pte", [(f"{name}/{path.name}", shape) for path, shape in input_files],
                    _run_options(n, threads), output_dir=f"{name}/outputs",
                )  # fmt: skip
                command = self.script(name, arguments)
                log(f"running {name} on {self.where}: {command}")
                start = time.monotonic()
                done = self._shell(command, timeout=3600, check=False)
                wall_s = time.monotonic() - start
                self._check_exit(name, done)
                pulled = local / "pulled"
                pulled.mkdir(exist_ok=True)
                self._pull(folder, pulled)
                self._shell(f"rm -rf {shlex.quote(folder)}", check=False)
                try:
                    report = parse_report((pulled / name / "report.json").read_text())
                    outputs = read_outputs(pulled / name / "outputs")
                except (NativeError, OSError) as error:
                    raise BenchError(f"{name} on {self.where}: {error}") from None
                self.device["cpu"] = dict(report["cpu"])
                run = NativeRun(report=report, outputs=outputs, wall_s=wall_s)
                results[name] = _runner_measurement(run, n)
        return results

    def _check_exit(self, name: str, done: subprocess.CompletedProcess[str]) -> None:
        match = _EXIT.search(done.stdout)
        said = "\n".join(line for line in (done.stderr + "\n" + done.stdout).splitlines() if _EXIT_MARKER not in line)
        if match is None:
            reason = _last_line(said) or f"exit status {done.returncode}, no output"
            raise BenchError(f"{name} on {self.where}: the runner did not run ({reason})")
        status = int(match[1])
        if status != 0:
            message = runner_error_line(said, status if status < 128 else -(status - 128))
            raise BenchError(f"{name} on {self.where}: the {self.built.target} runner failed: {message}")

    def close(self, runtimes: Sequence[Runtime]) -> None:
        if self.remote_dir is not None:
            self._shell(f"rm -rf {shlex.quote(self.remote_dir)}", check=False)
            self.remote_dir = None


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
    def for_device(cls, serial: str | None, log: Log = _quiet, adb: str = "adb") -> AdbRunnerTransport:
        """Check the phone first (fast), then build or take the bundle from the cache."""
        connection = AdbConnection(serial, adb)
        device = connection.connect()
        transport = cls(_build("android-arm64", "adb", log), serial, adb)
        transport.device.update(device)
        return transport

    @property
    def serial(self) -> str | None:
        return self.connection.serial

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "serial": self.serial,
            "runtime": "audiodeploy-runner android-arm64 bundle (C++, ExecuTorch runtime from the aarch64 executorch wheel, glibc loader)",
            "target": self.built.target,
            "runner": str(self.built.directory),
            "executorch": self.built.executorch_version,
            "remote_dir": self.bundle_dir,
            "device": dict(self.device),
        }

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


SSH_OPTIONS_ENV = "AUDIODEPLOY_SSH_OPTIONS"
"""Extra options for both ssh and scp (``-F CONFIG``, ``-i KEY``, ``-o NAME=VALUE``), shell-quoted."""
_ARM64 = ("aarch64", "arm64")


class SshTransport(RemoteRunnerTransport):
    """``--device ssh:[USER@]HOST[:PORT]``: an arm64 Linux board. The linux-aarch64 runner folder (the runner and
    the wheel's libraries; the board's own glibc serves) goes to a ``mktemp -d`` folder under /tmp over scp,
    each program and its inputs follow, the runner runs over ssh, its report and outputs come back over scp,
    and the folder is removed when the bench ends.

    ssh runs non-interactively (``BatchMode=yes``): a key or agent must let ``ssh [USER@]HOST true`` in
    without a password. Your ssh configuration applies; more options for both ssh and scp go in
    ``$AUDIODEPLOY_SSH_OPTIONS``. The build is chosen by the board's ``uname -m``: linux-aarch64 for an arm64
    board, the host build for a machine of this one's architecture (a loopback test, an x86-64 server).
    """

    kind = "ssh"

    def __init__(
        self,
        destination: SshDestination,
        built: BuiltRunner | None,
        options: Sequence[str] = (),
        ssh: str = "ssh",
        scp: str = "scp",
    ) -> None:
        super().__init__()
        self.destination = destination
        self.built = built  # type: ignore[assignment]  # None until for_device has seen the board
        self.options = list(options)
        self.ssh = ssh
        self.scp = scp
        self.where = f"ssh {destination}"

    @staticmethod
    def default_options() -> list[str]:
        return shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))

    @classmethod
    def for_device(
        cls,
        destination: str,
        log: Log = _quiet,
        options: Sequence[str] | None = None,
        ssh: str = "ssh",
        scp: str = "scp",
    ) -> SshTransport:
        """Check the board first (reachable, which architecture), then build or take its runner from the cache."""
        options = cls.default_options() if options is None else list(options)
        transport = cls(SshDestination.parse(destination), None, options, ssh, scp)
        machine, hostname = transport.connect()
        transport.device.update({"hostname": hostname, "machine": machine})
        transport.built = _build(cls.target_for(machine, str(transport.destination)), "ssh", log)
        return transport

    @staticmethod
    def target_for(machine: str, destination: str) -> str:
        if machine in _ARM64:
            return "linux-aarch64"
        if machine == platform.machine():
            return "host"
        raise BenchError(
            f"ssh {destination} is a {machine} machine; the runner is built for arm64 Linux (linux-aarch64) or for "
            f"this machine's {platform.machine()}"
        )

    def _base(self, program: str, port_flag: str) -> list[str]:
        port = [port_flag, str(self.destination.port)] if self.destination.port else []
        return [program, "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", *port, *self.options]

    def ssh_command(self, command: str) -> list[str]:
        return [*self._base(self.ssh, "-p"), "--", self.destination.target, command]

    def scp_command(self, sources: Sequence[str], destination: str) -> list[str]:
        return [*self._base(self.scp, "-P"), "-q", "-r", "-p", "--", *sources, destination]

    def _run(self, command: list[str], timeout: float, check: bool) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise BenchError(
                f"{command[0]}: not found on PATH; install it: apt-get install -y openssh-client"
            ) from None
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"`{shlex.join(command)}` did not finish in {timeout:.0f} s; is {self.destination} still up?"
            ) from None
        if done.returncode == 255 and command[0] == self.ssh:
            raise BenchError(
                f"{self.where} is not reachable ({_last_line(done.stderr) or 'exit status 255'}); check that "
                f"`ssh {self.destination.target}` logs in without a password"
            )
        if check and done.returncode != 0:
            raise BenchError(
                f"`{shlex.join(command)}` failed: {_last_line(done.stderr + done.stdout) or f'exit {done.returncode}'}"
            )
        return done

    def connect(self) -> tuple[str, str]:
        """The board's ``uname -m`` and host name; a board that does not answer is a one-line BenchError."""
        done = self._run(self.ssh_command("uname -m; uname -n"), timeout=60, check=False)
        lines = done.stdout.split()
        if done.returncode != 0 or len(lines) < 2:
            reason = _last_line(done.stderr + done.stdout) or f"exit status {done.returncode}"
            raise BenchError(
                f"{self.where} is not reachable ({reason}); check that `ssh {self.destination.target}` logs in without a password"
            )
        return lines[0], lines[1]

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "host": self.destination.host,
            "user": self.destination.user,
            "port": self.destination.port,
            "runtime": "audiodeploy-runner (C++, ExecuTorch runtime from the executorch wheel) over ssh",
            "target": self.built.target,
            "runner": str(self.built.directory),
            "executorch": self.built.executorch_version,
            "device": dict(self.device),
        }

    def _remote(self, path: str) -> str:
        return f"{self.destination.target}:{path}"

    def _shell(self, command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(self.ssh_command(command), timeout, check)

    def _push(self, files: Sequence[Path], remote_dir: str) -> None:
        self._run(self.scp_command([str(f) for f in files], self._remote(remote_dir + "/")), timeout=1800, check=True)

    def _pull(self, remote: str, local_dir: Path) -> None:
        self._run(self.scp_command([self._remote(remote)], str(local_dir) + "/"), timeout=1800, check=True)

    def _make_remote_dir(self) -> str:
        made = self._shell("mktemp -d /tmp/audiodeploy-bench.XXXXXX").stdout.strip()
        if not made.startswith("/tmp/audiodeploy-bench."):
            raise BenchError(f"{self.where}: mktemp gave {made!r}, not a folder under /tmp")
        return made
