"""Helpers shared by the benchmark scripts: interleaved timing and the machine record.

The machines we measure on are shared and noisy, so runtimes are never timed one
after another: :func:`time_interleaved` runs them round-robin, one call each per
round, so that a slow minute slows all of them and the ratios hold.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable


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
        return {
            "runs": len(self.seconds),
            "warmup": self.warmup,
            "median_s": self.median,
            "min_s": min(self.seconds),
            "max_s": max(self.seconds),
            "samples_s": self.seconds,
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


def machine_info(threads: int) -> dict:
    """What a result was measured on, and with which command."""

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([os.path.basename(sys.executable), *sys.argv]),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": version("torch"),
        "executorch": version("executorch"),
        "audiodeploy": version("audiodeploy"),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
