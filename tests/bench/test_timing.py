"""Interleaved timing, shared by `audiodeploy bench` and benchmarks/pos_conv.py."""

from __future__ import annotations

import numpy as np
import pytest

from audiodeploy.bench.timing import (
    VECTOR_EXTENSIONS,
    Runner,
    Timing,
    latency_dict,
    machine_info,
    paired_ratio,
    percentile,
    time_interleaved,
)


def recording_runners(calls: list[str], spec: dict[str, tuple[int, int]]) -> list[Runner]:
    return [Runner(name, (lambda n=name: calls.append(n)), runs, warmup) for name, (runs, warmup) in spec.items()]


def test_warmups_come_first_then_timed_rounds_rotate_the_starting_runner():
    calls: list[str] = []
    timings = time_interleaved(recording_runners(calls, {"a": (3, 1), "b": (3, 1), "c": (3, 1)}))
    assert calls[:3] == ["a", "b", "c"]  # warm-up round
    assert calls[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [t.rounds for t in timings.values()] == [[0, 1, 2]] * 3


def test_a_slow_runner_with_fewer_runs_is_spread_over_the_rounds():
    calls: list[str] = []
    timings = time_interleaved(recording_runners(calls, {"fast": (10, 2), "stock": (2, 1)}))
    assert timings["stock"].rounds == [0, 5]
    assert len(timings["fast"].seconds) == 10 and calls.count("stock") == 3


def test_invalid_counts_are_refused():
    with pytest.raises(ValueError, match="runs must be >= 1"):
        time_interleaved([Runner("x", lambda: None, 0, 1)])


def test_percentile_is_numpys_linear_percentile():
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
    for q in (0, 10, 50, 90, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_paired_ratio_compares_calls_made_in_the_same_round():
    a = Timing("a", 0, seconds=[1.0, 10.0, 1.0], rounds=[0, 1, 2])
    b = Timing("b", 0, seconds=[2.0, 20.0], rounds=[0, 1])
    assert paired_ratio(a, b) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="never timed in the same round"):
        paired_ratio(a, Timing("c", 0, seconds=[1.0], rounds=[7]))


def test_latency_record_has_every_figure():
    record = latency_dict([0.3, 0.1, 0.2], warmup=2)
    assert record == {
        "runs": 3,
        "warmup": 2,
        "median_s": 0.2,
        "p90_s": pytest.approx(0.28),
        "min_s": 0.1,
        "max_s": 0.3,
        "mean_s": pytest.approx(0.2),
        "samples_s": [0.3, 0.1, 0.2],
    }


def test_machine_record_names_the_command_and_the_versions():
    info = machine_info(2, command="audiodeploy bench wav2vec2")
    assert info["command"] == "audiodeploy bench wav2vec2" and info["threads"] == 2
    assert info["torch"] and info["executorch"]
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        flags = next(line for line in f if line.startswith(("flags", "Features"))).split(":", 1)[1].split()
    assert info["vector_extensions"] == [flag for flag in VECTOR_EXTENSIONS if flag in flags]
    assert info["vector_extensions"]  # an x86-64 or arm64 CPU has at least one of them
