"""Interleaved timing, thread settings and the machine record, shared by ``audiodeploy bench`` and ``benchmarks/``.

The machines we measure on are shared and noisy, so runtimes are never timed one
after another: :func:`time_interleaved` runs them round-robin, one call each per
round, so that a slow minute slows all of them and the ratios hold.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Runner:
    """One runtime to time: a no-argument call, its warm-up and timed run counts."""

    name: str
    call: Callable[[], object]
    runs: int
    warmup: int


@dataclass
class Timing:
    name: str
    warmup: int
    seconds: list[float] = field(default_factory=list)
    """Timed calls in the order they ran (warm-up excluded)."""
    rounds: list[int] = field(default_factory=list)
    """The round of each timed call, to pair calls made side by side (:func:`paired_ratio`)."""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def to_dict(self) -> dict:
        return latency_dict(self.seconds, self.warmup)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_dict(seconds: list[float], warmup: int) -> dict:
    """The latency record of every runtime and transport: counts, median, p90, min, max, mean, samples."""
    return {
        "runs": len(seconds),
        "warmup": warmup,
        "median_s": statistics.median(seconds),
        "p90_s": percentile(seconds, 90),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "mean_s": statistics.fmean(seconds),
        "samples_s": list(seconds),
    }


def _spread(count: int, rounds: int) -> set[int]:
    """``count`` round indices spread evenly over ``range(rounds)``."""
    return {i * rounds // count for i in range(count)}


def time_interleaved(runners: list[Runner], progress: Callable[[str], None] | None = None) -> dict[str, Timing]:
    """Warm up, then time every runner round-robin; return each runner's timed calls.

    All warm-up calls come first, round-robin. Then there are as many timed rounds
    as the largest ``runs``; a runner with fewer runs takes part in rounds spread
    evenly over them (a slow runner with 2 runs is timed in the first and the
    middle round, not twice at the start). Each round starts with a different
    runner, so no runner always follows the same one.
    """
    for r in runners:
        if r.runs < 1 or r.warmup < 0:
            raise ValueError(f"{r.name}: runs must be >= 1 and warmup >= 0 (got {r.runs}, {r.warmup})")
    timings = {r.name: Timing(r.name, r.warmup) for r in runners}

    for i in range(max(r.warmup for r in runners)):
        for r in _rotated(runners, i):
            if i < r.warmup:
                if progress:
                    progress(f"warm-up {i + 1}/{r.warmup}: {r.name}")
                r.call()

    rounds = max(r.runs for r in runners)
    schedule = {r.name: _spread(r.runs, rounds) for r in runners}
    for i in range(rounds):
        for r in _rotated(runners, i):
            if i in schedule[r.name]:
                start = time.perf_counter()
                r.call()
                elapsed = time.perf_counter() - start
                timings[r.name].seconds.append(elapsed)
                timings[r.name].rounds.append(i)
                if progress:
                    progress(f"run {len(timings[r.name].seconds)}/{r.runs}: {r.name} {elapsed * 1e3:,.3f} ms")
    return timings


def paired_ratio(a: Timing, b: Timing) -> float:
    """Median over the rounds both ran in of ``a``'s time / ``b``'s time in that round.

    Less sensitive than a ratio of medians to the machine slowing down for a while:
    each ratio compares two calls made seconds apart.
    """
    b_by_round = dict(zip(b.rounds, b.seconds))
    ratios = [t / b_by_round[i] for i, t in zip(a.rounds, a.seconds) if i in b_by_round]
    if not ratios:
        raise ValueError(f"{a.name} and {b.name} were never timed in the same round")
    return statistics.median(ratios)


def _rotated(runners: list[Runner], i: int) -> list[Runner]:
    k = i % len(runners)
    return runners[k:] + runners[:k]


def restart_with_passive_openmp_threads(command: Sequence[str]) -> None:
    """Run ``python COMMAND`` again in a fresh process with ``OMP_WAIT_POLICY=PASSIVE``, unless the policy is set.

    PyTorch's OpenMP threads spin between ops by default; on a machine where another process holds a core that made
    eager PyTorch 40x slower here, and in an interleaved run a spinning pool takes the CPU from the runtime timed
    next. The policy is read when torch loads, hence a fresh process.
    """
    if "OMP_WAIT_POLICY" in os.environ:
        return
    os.execve(sys.executable, [sys.executable, *command], {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})


def set_threads(threads: int | None) -> int:
    """One thread count for eager PyTorch and ExecuTorch's threadpool; returns it.

    ``None`` keeps ExecuTorch's threadpool size (one thread per performant core).
    Call it before any program is loaded: the threadpool is reset only then.
    """
    import torch

    from audiodeploy.runtime.program import runtime_log, set_threadpool_size, threadpool_size

    with runtime_log():  # the threadpool's first use logs what it read of the CPU
        et_threads = threadpool_size()
        threads = threads or et_threads
        torch.set_num_threads(threads)
        if et_threads != threads:
            set_threadpool_size(threads)
    return threads


def machine_info(threads: int | None, command: str | None = None) -> dict:
    """What a result was measured on, and with which command (default: this process's command line)."""

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command or shlex.join([os.path.basename(sys.executable), *sys.argv]),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "vector_extensions": _vector_extensions(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "load_average": _load_average(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "python": platform.python_version(),
        "torch": version("torch"),
        "executorch": version("executorch"),
        "onnxruntime": version("onnxruntime"),
        "audiodeploy": version("audiodeploy"),
        "source_tree": _source_tree(),
    }


def _source_tree() -> dict | None:
    """The git commit of the audiodeploy checkout measured, and whether it had uncommitted changes."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "uncommitted_changes": bool(status.strip())}


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages when the run started: a busy machine shows here."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


VECTOR_EXTENSIONS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "f16c",
    "amx_tile",
    "asimd",
    "asimdhp",
    "asimddp",
    "sve",
    "sve2",
    "i8mm",
    "bf16",
)
"""CPU flags (as /proc/cpuinfo spells them) that decide which XNNPACK and MLAS kernels run: fp16 arithmetic is
``avx512_fp16`` on x86 and ``asimdhp`` (ARMv8.2 FP16) on arm64; ``f16c`` only converts."""


def _vector_extensions() -> list[str] | None:
    """The :data:`VECTOR_EXTENSIONS` this CPU has; None where /proc/cpuinfo is not readable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    present = set(line.split(":", 1)[1].split())
                    return [flag for flag in VECTOR_EXTENSIONS if flag in present]
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
