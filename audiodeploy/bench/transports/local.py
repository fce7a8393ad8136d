"""``--device local``: every runtime in this process, timed interleaved round-robin
(:func:`~audiodeploy.bench.timing.time_interleaved`): ExecuTorch's Python runtime, and eager PyTorch or ONNX
Runtime beside it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from audiodeploy.bench.memory import PeakResident
from audiodeploy.bench.results import Latency, LocalTransportDescription
from audiodeploy.bench.runtimes import Runtime
from audiodeploy.bench.timing import Runner, time_interleaved
from audiodeploy.bench.transports.base import Log, Measurement, RunCounts, Transport, quiet


class LocalTransport(Transport):
    """Every runtime in this process; each loaded once, then timed interleaved on each input."""

    kind = "local"
    programs_per_length = False
    """One program serves every length (the export's dynamic length axis)."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[float | None, int | None]] = {}
        """Runtime name -> (its load time, None for one that does not load; the memory its load retained)."""

    def describe(self) -> LocalTransportDescription:
        return LocalTransportDescription(
            kind="local", runtime="ExecuTorch Python runtime (portable_lib) in the benchmarking process"
        )

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        """`threads` is ignored: the process-wide count was set before anything loaded (timing.set_threads)."""
        self._load(runtimes, log)
        first: dict[str, tuple[torch.Tensor, int | None]] = {}
        for runtime in runtimes:
            log(f"first call: {runtime.name}")
            with PeakResident() as memory:
                output = runtime.run(inputs)
            retained = self._loaded[runtime.name][1]
            peak = None if retained is None or memory.extra is None else retained + memory.extra
            first[runtime.name] = (output, peak)
        runners = [Runner(r.name, _call_with(r, inputs), counts[r.name].runs, counts[r.name].warmup) for r in runtimes]
        timings = time_interleaved(runners, progress=log)
        return {
            r.name: Measurement(
                load_s=self._loaded[r.name][0],
                latency=Latency.of(timings[r.name].seconds, timings[r.name].warmup),
                peak_rss_bytes=first[r.name][1],
                output=first[r.name][0],
                timing=timings[r.name],
            )
            for r in runtimes
        }

    def _load(self, runtimes: Sequence[Runtime], log: Log) -> None:
        """Load the runtimes not loaded yet, timing each load and keeping the memory it retained."""
        for runtime in runtimes:
            if runtime.name not in self._loaded:
                log(f"loading {runtime.name}")
                with PeakResident() as memory:
                    start = time.perf_counter()
                    runtime.load()
                    load_s = time.perf_counter() - start
                self._loaded[runtime.name] = (load_s if runtime.loads else None, memory.retained)

    def close(self, runtimes: Sequence[Runtime]) -> None:
        for runtime in runtimes:
            runtime.unload()


def _call_with(runtime: Runtime, inputs: tuple[torch.Tensor, ...]) -> Callable[[], object]:
    """One timed call of `runtime` on `inputs`; a function per runtime, so each closes over its own."""
    return lambda: runtime.run(inputs)
