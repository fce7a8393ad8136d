"""The project's runner on this machine.

- ``native``: every runtime in this process (:class:`~audiodeploy.bench.transports.local.LocalTransport`),
  side by side with the host build of the runner; each ExecuTorch program appears twice, ``NAME`` (Python)
  and ``NAME-native`` (the runner).
- ``qemu-aarch64``: the linux-aarch64 runner under ``qemu-aarch64`` here; its latency is emulated and says
  nothing about arm64 hardware, its outputs are what it checks.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Literal, cast

import torch

from audiodeploy.bench.device import RUNNER_DEVICES
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import NATIVE_SUFFIX, RunnerTransportDescription, RuntimeDescription
from audiodeploy.bench.runtimes import ExecuTorchRuntime, Runtime
from audiodeploy.bench.transports.base import (
    SCRATCH_PREFIX,
    Log,
    Measurement,
    RunCounts,
    Transport,
    measure_programs,
    quiet,
    runtime_description,
)
from audiodeploy.bench.transports.local import LocalTransport
from audiodeploy.bench.transports.project_runner import build_for_device, report_measurement, run_options
from audiodeploy.native import BuiltRunner, NativeError, is_emulated, run_runner
from audiodeploy.native.run import RunnerCpu

RunnerDevice = Literal["native", "qemu-aarch64"]


class RunnerTransport(Transport):
    """The project's C++ runner (``audiodeploy runner build``) started as a process on this machine: the host
    build, or the linux-aarch64 build under ``qemu-aarch64``, whose latency is emulated and says nothing about
    arm64 hardware; its outputs are what it checks, compared with eager like every transport's.

    Each program runs in one runner process: ``warmup + runs`` executions of the same inputs, given at their
    shapes (the runner takes any length up to the program's bound, so one program serves every length).
    """

    programs_per_length = False

    def __init__(self, device: str, built: BuiltRunner) -> None:
        if device not in RUNNER_DEVICES:
            raise BenchError(f"--device {device}: the runner runs on this machine for {', '.join(RUNNER_DEVICES)} only")
        self.kind: RunnerDevice = cast(RunnerDevice, device)
        self.built = built
        self.emulated = is_emulated(built)
        self._cpu: RunnerCpu | None = None
        self._emulated_cpu: str | None = None

    @classmethod
    def for_device(cls, device: str, log: Log = quiet) -> RunnerTransport:
        """Build (or take from the cache) the runner that `device` needs; a missing tool is a BenchError."""
        return cls(device, build_for_device(RUNNER_DEVICES[device], device, log))

    def describe(self) -> RunnerTransportDescription:
        """The CPU the runner reported is the device (None before it ran)."""
        return RunnerTransportDescription(
            kind=self.kind,
            runtime="audiodeploy-runner (C++, ExecuTorch runtime from the executorch wheel)",
            target=self.built.target,
            runner=str(self.built.directory),
            executorch=self.built.executorch_version,
            emulated=self.emulated,
            emulated_cpu=self._emulated_cpu or None,
            device=self._cpu,
        )

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
            measure_program = partial(
                self._measure_program, scratch=Path(scratch), inputs=inputs, threads=threads, log=log
            )
            return measure_programs(runtimes, counts, "in the native runner", measure_program)

    def _measure_program(
        self,
        runtime: ExecuTorchRuntime,
        counts: RunCounts,
        *,
        scratch: Path,
        inputs: tuple[torch.Tensor, ...],
        threads: int | None,
        log: Log,
    ) -> Measurement:
        """One program in one runner process; the CPU it reports becomes the record's device."""
        program = scratch / f"{runtime.name}.pte"
        program.write_bytes(runtime.buffer)
        log(f"running {runtime.name} in the {self.built.target} runner" + (" (emulated)" if self.emulated else ""))
        try:
            run = run_runner(self.built, program, list(inputs), run_options(counts, threads))
        except NativeError as error:
            raise BenchError(f"{runtime.name} on --device {self.kind}: {error}") from None
        self._cpu = run.report.cpu
        self._emulated_cpu = run.emulated_cpu
        return report_measurement(run, counts, self.emulated)


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
    def for_device(cls, log: Log = quiet) -> NativeSideBySide:
        """This process's runtimes, and the host runner built (or taken from the cache) beside them."""
        return cls(LocalTransport(), RunnerTransport.for_device("native", log))

    def describe(self) -> RunnerTransportDescription:
        return dataclasses.replace(
            self.native.describe(),
            runtime=(
                "ExecuTorch Python runtime (portable_lib) in the benchmarking process, and each ExecuTorch program "
                f"again as NAME{NATIVE_SUFFIX} in audiodeploy-runner (C++, ExecuTorch runtime from the executorch wheel)"
            ),
        )

    def runtime_infos(self, runtimes: Sequence[Runtime]) -> dict[str, RuntimeDescription]:
        infos = {}
        for runtime in runtimes:
            info = infos[runtime.name] = runtime_description(runtime)
            if isinstance(runtime, ExecuTorchRuntime):
                infos[runtime.name + NATIVE_SUFFIX] = dataclasses.replace(
                    info,
                    name=runtime.name + NATIVE_SUFFIX,
                    label=f"{info.label}, in the native runner (audiodeploy-runner, C++)",
                    notes=(
                        *info.notes,
                        f"the same program as {runtime.name}, run by audiodeploy-runner in its own process",
                    ),
                )
        return infos

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = quiet,
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
