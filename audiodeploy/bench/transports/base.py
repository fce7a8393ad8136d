"""What every transport shares: the :class:`Transport` protocol the bench calls, the :class:`Measurement` it
returns per runtime, the run counts it is given, and the one loop (:func:`measure_programs`) by which the
runner transports measure ExecuTorch programs, each in its own runner process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import Latency, RuntimeDescription, TransportDescription
from audiodeploy.bench.runtimes import ExecuTorchRuntime, Runtime
from audiodeploy.bench.timing import Timing

Log = Callable[[str], None]

SCRATCH_PREFIX = "audiodeploy-bench-"
"""The prefix of the temporary folders in which programs and inputs are written before they run or travel."""


@dataclass(frozen=True)
class RunCounts:
    """How many timed runs one runtime gets, after how many untimed warm-up runs."""

    runs: int
    warmup: int


@dataclass
class Measurement:
    """One runtime on one input: load time, latency record, memory, and what the transport observed."""

    load_s: float | None
    latency: Latency
    peak_rss_bytes: int | None = None
    output: torch.Tensor | None = None
    timing: Timing | None = None
    """The timed calls with their rounds, for paired ratios (local only)."""
    notes: list[str] = field(default_factory=list)


def runtime_description(runtime: Runtime) -> RuntimeDescription:
    """What the record says of `runtime` (its `RuntimeInfo`)."""
    return RuntimeDescription.from_dict(runtime.info.to_dict())


def quiet(message: str) -> None:
    """The log when the caller wants none: says nothing."""


class Transport:
    """What every transport offers the bench: ``describe()``, ``runtime_infos()``, ``measure()``, ``close()``."""

    kind: str
    programs_per_length = False
    """True when one program per input length is needed (a runner that cannot resize inputs)."""

    def describe(self) -> TransportDescription:
        """The record's ``transport``: what ran the programs, and where."""
        raise NotImplementedError

    def runtime_infos(self, runtimes: Sequence[Runtime]) -> dict[str, RuntimeDescription]:
        """The record's ``runtimes``: one entry per name that :meth:`measure` returns."""
        return {runtime.name: runtime_description(runtime) for runtime in runtimes}

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        """Every runtime on `inputs`, `counts[name]` runs each, by runtime name."""
        raise NotImplementedError

    def close(self, runtimes: Sequence[Runtime]) -> None:
        """Release what :meth:`measure` left loaded or copied; nothing by default."""


ProgramMeasurer = Callable[[ExecuTorchRuntime, RunCounts], Measurement]
"""Runs one ExecuTorch program `counts` times in a runner process and measures it."""


def measure_programs(
    runtimes: Sequence[Runtime], counts: dict[str, RunCounts], where: str, measure_program: ProgramMeasurer
) -> dict[str, Measurement]:
    """Each runtime in turn through `measure_program`, by name. A runner runs programs, not Python: a runtime
    that is not an ExecuTorch program is a BenchError saying it cannot run `where` ("on the phone"), raised when
    its turn comes, after the programs before it have run."""
    results = {}
    for runtime in runtimes:
        if not isinstance(runtime, ExecuTorchRuntime):
            raise BenchError(f"{runtime.name} cannot run {where}: only ExecuTorch programs can")
        results[runtime.name] = measure_program(runtime, counts[runtime.name])
    return results


def last_line(text: str) -> str:
    """The last line of a tool's output that is not blank, cut to 300 characters: what a one-line error quotes."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
