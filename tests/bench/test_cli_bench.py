"""`audiodeploy bench` end to end through a subprocess, on tiny configurations; and every bad input:
one line on stderr naming the problem, a non-zero exit, and no results file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audiodeploy.bench.results import validate

from .conftest import FakeAdb

# tests/bench/conftest.py's tiny_wav2vec2_bench compares these and, after them, the two int8 runtimes (test_int8.py).
FP32_RUNTIMES = ("audiodeploy", "stock", "eager", "onnxruntime")


def audiodeploy(
    *args: str, env: dict[str, str | None] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the command; ``env`` adds variables to this process's, or removes those given as None."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "audiodeploy", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env={k: v for k, v in merged.items() if v is not None},
    )


def assert_clean_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_compare_prints_a_table_with_every_runtime_and_ratio(tiny_wav2vec2_bench):
    stdout, _ = tiny_wav2vec2_bench
    for name in FP32_RUNTIMES:
        assert f"\n{name} " in stdout
    assert "audiodeploy/this" in stdout and "faster" in stdout


def test_compare_json_holds_every_runtimes_figures_and_the_ratios(tiny_wav2vec2_bench):
    _, directory = tiny_wav2vec2_bench
    record = validate(json.loads((directory / "r.json").read_text()))
    assert record["machine"]["command"].startswith("audiodeploy bench wav2vec2 --variant tiny")
    assert record["target"]["length_range_seconds"] == [1.0, 1.0]  # --min-seconds 1 --max-seconds 1
    assert record["machine"]["omp_wait_policy"] == "PASSIVE"  # bench re-ran itself so that OpenMP threads sleep
    assert list(record["runtimes"]) == [*FP32_RUNTIMES, "audiodeploy-int8", "onnxruntime-int8"]
    assert record["runtimes"]["stock"]["ops_outside_delegates"].get("aten.convolution") == 1
    assert "aten.convolution" not in record["runtimes"]["audiodeploy"]["ops_outside_delegates"]
    (case,) = record["cases"]
    assert case["audio_seconds"] == 1.0 and case["input_shape"] == [1, 16000]
    for name, figures in case["runtimes"].items():
        latency = figures["latency"]
        assert latency["min_s"] <= latency["median_s"] <= latency["p90_s"] <= latency["max_s"], name
        assert latency["runs"] == (2 if name == "stock" else 3)
        assert figures["rtf"] == pytest.approx(latency["median_s"])
        assert figures["max_abs_diff_vs_eager"] < (1e-4 if name in FP32_RUNTIMES else 1.0)  # int8: test_int8.py
        assert figures["peak_rss_bytes"] is None or figures["peak_rss_bytes"] >= 0
        assert (figures["load_s"] is None) == (name == "eager")
    assert set(case["ratios"]) == {f"audiodeploy/{name}" for name in list(case["runtimes"])[1:]}
    assert case["ratios"]["audiodeploy/stock"] == pytest.approx(
        case["runtimes"]["audiodeploy"]["latency"]["median_s"] / case["runtimes"]["stock"]["latency"]["median_s"]
    )


def test_profile_shows_where_each_program_and_session_spends_its_time(tiny_wav2vec2_bench):
    stdout, directory = tiny_wav2vec2_bench
    (case,) = json.loads((directory / "r.json").read_text())["cases"]
    for name in ("audiodeploy", "stock", "audiodeploy-int8", "onnxruntime", "onnxruntime-int8"):
        profile = case["runtimes"][name]["profile"]
        assert profile["median_ms"] > 0 and profile["operators"], name
        assert sum(o["share"] for o in profile["operators"]) <= 1.0 + 1e-9, name
        assert profile["engine"] == ("onnxruntime" if name.startswith("onnx") else "executorch")
        assert profile["sgemm_gflops"] > 0
    assert "profile" not in case["runtimes"]["eager"]
    ours = case["runtimes"]["audiodeploy"]["profile"]
    # In program order; ops of no submodule (the waveform's normalization, first) are "(top-level module)".
    layers = [layer["name"] for layer in ours["layers"] if layer["name"] != "(top-level module)"]
    assert layers[0] == "model.wav2vec2.feature_extractor.conv_layers.0" and "model.lm_head" in layers
    assert "model.wav2vec2.encoder.layers.1" in layers
    assert ours["gemm_gflops"] > 0
    # Stock leaves the weight-normed positional convolution outside its delegates: it shows as a kernel there.
    stock = {o["name"] for o in case["runtimes"]["stock"]["profile"]["operators"]}
    assert "convolution.out (outside delegates)" in stock
    assert "profile of audiodeploy at 1 s (executorch)" in stdout and "profile of onnxruntime at 1 s" in stdout


def test_compare_writes_a_png_chart(tiny_wav2vec2_bench):
    _, directory = tiny_wav2vec2_bench
    png = (directory / "r.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_an_openmp_wait_policy_the_user_set_is_kept(tmp_path, linear_pte):
    result = audiodeploy(
        "bench",
        str(linear_pte),
        "--runs",
        "1",
        "--warmup",
        "0",
        "--json",
        str(tmp_path / "r.json"),
        env={"OMP_WAIT_POLICY": "ACTIVE"},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["machine"]["omp_wait_policy"] == "ACTIVE"


# --- bad input ------------------------------------------------------------------------------


def test_missing_onnxruntime(tmp_path):
    stub = tmp_path / "stub" / "onnxruntime"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 'onnxruntime'\")\n")
    path = os.pathsep.join(p for p in (str(tmp_path / "stub"), os.environ.get("PYTHONPATH")) if p)
    result = audiodeploy(
        "bench",
        "wav2vec2",
        "--variant",
        "tiny",
        "--compare",
        "onnxruntime",
        "--json",
        str(tmp_path / "r.json"),
        env={"PYTHONPATH": path},
    )
    assert_clean_error(result, "onnxruntime", "not installed", "pip install -e '.[bench]'")
    assert not (tmp_path / "r.json").exists()


def test_unreachable_adb_device(tmp_path, linear_pte):
    fake = FakeAdb(tmp_path / "adb")
    result = audiodeploy(
        "bench",
        str(linear_pte),
        "--device",
        "adb:SER9",
        "--runner",
        str(fake.runner),
        "--json",
        str(tmp_path / "r.json"),
        env=fake.env("unreachable"),
    )
    assert_clean_error(result, "adb device SER9 is not reachable", "not found")
    assert not (tmp_path / "r.json").exists()


def test_runner_that_fails_on_the_device(tmp_path, linear_pte):
    fake = FakeAdb(tmp_path / "adb")
    result = audiodeploy(
        "bench",
        str(linear_pte),
        "--device",
        "adb",
        "--runner",
        str(fake.runner),
        "--json",
        str(tmp_path / "r.json"),
        env=fake.env("method-fails"),
    )
    assert_clean_error(result, "executor_runner did not complete on the device", "Loading of method forward failed")
    assert not (tmp_path / "r.json").exists()


def test_pte_that_cannot_load(tmp_path):
    broken = tmp_path / "broken.pte"
    broken.write_bytes(b"\x00" * 64)
    result = audiodeploy("bench", str(broken), "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"))
    assert_clean_error(result, "broken.pte is not a loadable ExecuTorch program")
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.png").exists()


def test_threads_beyond_four_per_cpu_are_refused_before_anything_is_built(tmp_path):
    """``--threads 100000`` used to end in thread creation's MemoryError and a bench that hung."""
    limit = 4 * os.cpu_count()
    result = audiodeploy(
        "bench", "wav2vec2", "--variant", "tiny", "--threads", "100000", "--json", str(tmp_path / "r.json")
    )
    assert result.returncode == 2
    assert_clean_error(result, "--threads 100000 is more than", f"give at most {limit}")
    assert result.stderr.count("\n") == 1 and "MemoryError" not in result.stderr  # no progress line: nothing started
    assert not (tmp_path / "r.json").exists()


def test_threads_at_four_per_cpu_are_taken(tmp_path, linear_pte):
    limit = 4 * os.cpu_count()
    result = audiodeploy(
        "bench",
        str(linear_pte),
        "--threads",
        str(limit),
        "--runs",
        "1",
        "--warmup",
        "0",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["threads"] == limit


def test_unknown_compare_name(tmp_path):
    result = audiodeploy("bench", "wav2vec2", "--compare", "tflite", "--json", str(tmp_path / "r.json"))
    assert_clean_error(result, "--compare tflite", "stock, eager, onnxruntime")
    assert not (tmp_path / "r.json").exists()


def test_pte_on_the_phone_writes_the_same_schema(tmp_path, linear_pte):
    fake = FakeAdb(tmp_path / "adb")
    result = audiodeploy(
        "bench",
        str(linear_pte),
        "--device",
        "adb:SER1",
        "--runner",
        str(fake.runner),
        "--runs",
        "2",
        "--warmup",
        "1",
        "--json",
        str(tmp_path / "r.json"),
        env=fake.env(),
    )
    assert result.returncode == 0, result.stderr
    record = validate(json.loads((tmp_path / "r.json").read_text()))
    assert record["transport"]["kind"] == "adb" and record["transport"]["serial"] == "SER1"
    assert "Pixel 8 over adb" in result.stdout
