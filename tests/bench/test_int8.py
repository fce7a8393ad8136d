"""`--compare audiodeploy-int8,onnxruntime-int8`: int8 beside fp32 in one interleaved run, with fidelity recorded.

Bars (tiny wav2vec2, synthetic weights, 1 s): both int8 runtimes agree with eager on at least 90% of the frames'
argmax and have an output SNR of at least 20 dB; fp32 audiodeploy agrees on every frame.
"""

from __future__ import annotations

import json

import pytest

from audiodeploy.bench import BenchError, BenchRequest, check, parse_compare
from audiodeploy.bench.results import format_table, validate
from audiodeploy.recipes.errors import QuantizationSchemeError

INT8_ARGMAX = 0.9
INT8_SNR_DB = 20.0


@pytest.fixture(scope="module")
def record(tiny_wav2vec2_bench) -> dict:
    """The bench run tests/bench/test_cli_bench.py checks too (tests/bench/conftest.py): int8 and fp32 together."""
    _, directory = tiny_wav2vec2_bench
    return json.loads((directory / "r.json").read_text())


def test_int8_names_are_accepted_and_ordered_after_fp32():
    assert parse_compare("onnxruntime-int8,eager,audiodeploy-int8") == ("eager", "audiodeploy-int8", "onnxruntime-int8")


@pytest.mark.parametrize(
    ("request_", "error", "message"),
    [
        (
            BenchRequest("univnet", variant="tiny", compare=("audiodeploy-int8",)),
            QuantizationSchemeError,
            "'univnet' cannot be quantized",
        ),
        (
            BenchRequest("wav2vec2", device="qemu-aarch64", compare=("onnxruntime-int8",)),
            BenchError,
            "drop onnxruntime-int8 from --compare",
        ),
    ],
)
def test_int8_mistakes_are_found_before_anything_is_built(request_, error, message):
    with pytest.raises(error, match=message) as caught:
        check(request_)
    assert "\n" not in str(caught.value)


def test_int8_runtimes_are_measured_in_the_same_run_as_fp32(record):
    assert list(record["runtimes"]) == [
        *("audiodeploy", "stock", "eager", "onnxruntime"),
        *("audiodeploy-int8", "onnxruntime-int8"),
    ]
    int8 = record["runtimes"]["audiodeploy-int8"]
    assert (int8["delegates"], int8["ops_outside_delegates"]) == (1, {})
    quantization = int8["lowering_report"]["quantization"]
    assert quantization["scheme"] == "int8-dynamic"
    assert tuple(quantization["keep_fp32"]) == ("*.feature_extractor.conv_layers.0.*", "*.lm_head")  # the default
    assert int8["program_bytes"] < record["runtimes"]["audiodeploy"]["program_bytes"]
    assert record["runtimes"]["onnxruntime-int8"]["program_bytes"] < record["runtimes"]["onnxruntime"]["program_bytes"]
    (case,) = record["cases"]
    assert set(case["paired_ratios"]) == {
        f"audiodeploy/{n}" for n in ("stock", "eager", "onnxruntime", "audiodeploy-int8", "onnxruntime-int8")
    }


def test_int8_fidelity_against_eager_is_recorded(record):
    (case,) = record["cases"]
    figures = case["runtimes"]
    for name in ("audiodeploy-int8", "onnxruntime-int8"):
        assert figures[name]["argmax_agreement_vs_eager"] >= INT8_ARGMAX, (name, figures[name])
        assert figures[name]["snr_db_vs_eager"] >= INT8_SNR_DB, (name, figures[name])
        assert figures[name]["max_abs_diff_vs_eager"] > 0
    assert figures["audiodeploy"]["argmax_agreement_vs_eager"] == 1.0
    assert figures["eager"]["snr_db_vs_eager"] is None and figures["eager"]["max_abs_diff_vs_eager"] == 0.0
    table = format_table(record)
    assert "SNR" in table and "argmax" in table and "\nonnxruntime-int8 " in table


def test_records_without_the_fidelity_figures_still_validate(record):
    old = {
        **record,
        "cases": [{**c, "runtimes": {n: dict(f) for n, f in c["runtimes"].items()}} for c in record["cases"]],
    }
    for figures in old["cases"][0]["runtimes"].values():
        del figures["snr_db_vs_eager"], figures["argmax_agreement_vs_eager"]
    validate(old)
    assert "argmax" not in format_table(old)
