"""What the transports that run the project's C++ runner (``audiodeploy runner build``) share, here or on
another machine: building it for a device, its run options, and a :class:`Measurement` from its JSON report."""

from __future__ import annotations

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import Latency
from audiodeploy.bench.transports.base import Log, Measurement, RunCounts
from audiodeploy.native import BuiltRunner, NativeError, NativeRun, RunOptions, build_runner

PEAK_RSS_NOTE = "peak_rss_bytes: the runner process's peak resident memory, the whole process (getrusage)"
EMULATED_NOTE = "emulated arm64 (qemu-aarch64): the latency is not an arm64 measurement; the output is checked"


def report_measurement(run: NativeRun, counts: RunCounts, emulated: bool = False) -> Measurement:
    """A Measurement from the runner's report (``warmup`` untimed runs were made before its latencies)."""
    notes = [f"runner threadpool: {run.report.threads} thread(s)", PEAK_RSS_NOTE]
    if emulated:
        notes.insert(0, EMULATED_NOTE + (f" (qemu -cpu {run.emulated_cpu})" if run.emulated_cpu else ""))
    return Measurement(
        load_s=run.report.load_ms.total / 1e3,
        latency=Latency.of([ms / 1e3 for ms in run.latencies_ms], counts.warmup),
        peak_rss_bytes=run.report.peak_rss_bytes,
        output=run.outputs[0] if run.outputs else None,
        notes=notes,
    )


def run_options(counts: RunCounts, threads: int | None) -> RunOptions:
    """The runner's options for `counts`; no thread count given (None) lets the runner choose (0)."""
    return RunOptions(warmup=counts.warmup, iterations=counts.runs, threads=threads or 0)


def build_for_device(target: str, device: str, log: Log) -> BuiltRunner:
    """The runner for `target`, built or taken from the cache; a failed build names ``--device`` `device`."""
    try:
        return build_runner(target, log=log)  # type: ignore[arg-type]
    except NativeError as error:
        raise BenchError(f"--device {device}: {error}") from None
