"""`audiodeploy.bench` as a library: records on tiny targets, and what fails only once the target is built or loaded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from audiodeploy import recipes
from audiodeploy.bench import BenchError, BenchRequest, run_bench
from audiodeploy.bench.results import SCHEMA
from audiodeploy.recipes.spec import LengthRange
from audiodeploy.runtime import ProgramLoadError


def test_a_pte_that_cannot_load_is_a_load_error(tmp_path):
    broken = tmp_path / "broken.pte"
    broken.write_bytes(b"not a flatbuffer at all" * 8)
    with pytest.raises(ProgramLoadError, match="broken.pte is not a loadable ExecuTorch program"):
        run_bench(BenchRequest(str(broken), runs=1, warmup=0))


def test_pte_target_runs_alone_at_its_shape(linear_pte):
    record = run_bench(BenchRequest(str(linear_pte), runs=3, warmup=1))
    assert record["schema"] == SCHEMA and record["name"] == "linear" and record["baseline"] is None
    assert record["runtimes"]["pte"]["delegates"] == 1
    (case,) = record["cases"]
    assert case["input_shape"] == [1, 8] and case["ratios"] == {} and case["audio_seconds"] is None
    figures = case["runtimes"]["pte"]
    assert figures["latency"]["runs"] == 3 and figures["load_s"] > 0 and figures["rtf"] is None
    assert figures["max_abs_diff_vs_eager"] is None  # no module to compare with: not made up


def test_vocoder_at_two_lengths_against_eager():
    """HiFi-GAN (tiny-v3, a third of tiny's convolutions): the mel input's audio duration drives the real-time
    factor; one program, two lengths."""
    record = run_bench(
        BenchRequest("hifigan", variant="tiny-v3", compare=("eager",), seconds=(0.5, 1.0), runs=2, warmup=1)
    )
    assert record["target"]["input_kind"] == "mel" and record["target"]["parameters"] > 0
    assert [c["seconds"] for c in record["cases"]] == [0.5, 1.0]
    audiodeploy_info = record["runtimes"]["audiodeploy"]
    assert audiodeploy_info["delegates"] >= 1 and "aten.convolution" not in audiodeploy_info["ops_outside_delegates"]
    for case in record["cases"]:
        assert case["audio_seconds"] == pytest.approx(case["seconds"], rel=0.05)
        fig = case["runtimes"]["audiodeploy"]
        assert fig["rtf"] == pytest.approx(fig["latency"]["median_s"] / case["audio_seconds"])
        assert fig["max_abs_diff_vs_eager"] < 1e-3
        assert case["runtimes"]["eager"]["max_abs_diff_vs_eager"] == 0.0 and case["runtimes"]["eager"]["load_s"] is None
        assert set(case["ratios"]) == set(case["paired_ratios"]) == {"audiodeploy/eager"}


def test_codec_decode_is_lowered_alone_and_timed_on_the_codes_eager_encode_gives():
    """DAC's tiny decode at one fixed length: its input is eager encode's codes for the case's audio, frames first."""
    request = BenchRequest("dac", variant="tiny", method="decode", compare=("eager",), seconds=(0.5,), runs=2, warmup=0)
    record = run_bench(replace(request, min_seconds=0.5, max_seconds=0.5))
    assert record["name"] == "dac-tiny-decode" and record["target"]["method"] == "decode"
    assert record["target"]["input_kind"] == "codes"
    assert record["runtimes"]["audiodeploy"]["delegates"] == 1
    (case,) = record["cases"]
    built = recipes.get("dac").build("tiny", length_range=LengthRange.fixed(0.5))
    assert case["input_shape"] == list(built.decoder.input.shape(case["input_length"]))  # (1, frames, codebooks)
    assert case["audio_seconds"] == pytest.approx(0.5)
    assert case["runtimes"]["audiodeploy"]["max_abs_diff_vs_eager"] < built.atol
    assert set(case["ratios"]) == {"audiodeploy/eager"}


def test_a_two_method_pte_is_refused_naming_the_methods_to_bench_its_recipe_with(codec_model):
    with pytest.raises(BenchError, match=r"no 'forward' method, .* with --method decode or encode$"):
        run_bench(BenchRequest(str(codec_model), runs=1, warmup=0))


def test_pte_target_on_a_phone_through_adb(fake_adb, linear_pte):
    record = run_bench(
        BenchRequest(str(linear_pte), device="adb:SER1", runner=fake_adb.runner, runs=2, warmup=1, threads=4)
    )
    assert record["transport"]["kind"] == "adb" and record["transport"]["device"]["model"] == "Pixel 8"
    figures = record["cases"][0]["runtimes"]["pte"]
    assert figures["latency"]["samples_s"] == pytest.approx([0.0205, 0.021])
    assert figures["peak_rss_bytes"] is None and figures["load_s"] == pytest.approx(0.118204)
    assert any("runner threadpool: 4 thread(s)" in n for n in figures["notes"])


def test_recipe_on_a_phone_lowers_one_fixed_length_program_per_length(fake_adb):
    record = run_bench(
        BenchRequest(
            "wav2vec2",
            variant="tiny",
            compare=("stock",),
            device="adb",
            runner=fake_adb.runner,
            seconds=(0.5,),
            runs=2,
            warmup=0,
            stock_runs=1,
            stock_warmup=0,
        )
    )
    (case,) = record["cases"]
    assert set(case["runtimes"]) == {"audiodeploy", "stock"} and set(case["ratios"]) == {"audiodeploy/stock"}
    pushed = {p.name for p in (fake_adb.device / "data/local/tmp/audiodeploy-bench").iterdir()}
    assert pushed == {"executor_runner"}  # programs and inputs are removed after the run
    runs = [c for c in fake_adb.calls() if any("--model_path=" in part for part in c)]
    assert ["audiodeploy.pte" in r[-1] for r in runs] == [True, False]
    assert "--num_executions=2" in runs[0][-1] and "--num_executions=1" in runs[1][-1]
    shape = case["input_shape"]
    assert shape == [1, 8000]
