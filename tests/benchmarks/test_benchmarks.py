"""benchmarks/: pos_conv.py on the shared timing code keeps its result schema; models.md renders bench results."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

from tests.bench.test_results import make_record

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_pos_conv_at_a_small_size_writes_its_schema_and_renders(tmp_path, capsys):
    pos_conv = load("pos_conv")
    record = pos_conv.main(
        [
            "--channels",
            "16",
            "--kernel",
            "8",
            "--groups",
            "4",
            "--length",
            "20",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--stock-runs",
            "1",
            "--stock-warmup",
            "0",
            "--json",
            str(tmp_path / "pos_conv.json"),
        ]
    )
    written = json.loads((tmp_path / "pos_conv.json").read_text())
    assert written["benchmark"] == "pos_conv" and written == json.loads(json.dumps(record))
    assert {"stock", "audiodeploy", "reference", "eager"} <= set(written["results"])
    for name, result in written["results"].items():
        assert {"runs", "warmup", "median_s", "min_s", "max_s", "samples_s"} <= set(result["latency"]), name
    assert set(written["ratios"]) >= {"stock/audiodeploy", "audiodeploy/reference", "audiodeploy/eager"}
    assert "| stock ExecuTorch (fold=False) | 2 |" in capsys.readouterr().out
    markdown = load("generate_models_md").render([written])
    assert "## Positional convolution: `weight_norm(Conv1d(16, 16, 8, padding=4, groups=4), dim=2)`" in markdown


def test_models_md_puts_bench_results_side_by_side():
    markdown = load("generate_models_md").render([make_record((1.0, 10.0))])
    assert "## Latency side by side (`audiodeploy bench --compare`)" in markdown
    assert (
        "| wav2vec2 base | 1 s | 2026-11-29 | 241 ms (52) | 1,314 ms (53) | 346 ms | 170 ms | 0.183 | 0.697 | 1.42 |"
        in markdown
    )
    assert "| wav2vec2 base | 10 s |" in markdown
    assert "### wav2vec2 base (wav2vec2-base)" in markdown and "94.0 M parameters" in markdown


def test_models_md_says_when_a_program_takes_one_length_alone():
    record = make_record((1.0,))
    record["target"]["length_range_seconds"] = [1.0, 1.0]
    rows = load("generate_models_md").bench_summary([record, make_record((1.0, 10.0))])
    assert sum(row.startswith("| wav2vec2 base | 1 s, one-length program | 2026-11-29 |") for row in rows) == 1
    assert sum(row.startswith("| wav2vec2 base | 1 s | 2026-11-29 |") for row in rows) == 1


def test_models_md_lists_an_int8_run_in_the_latency_table_only_where_no_fp32_comparison_measured_it():
    fp32 = make_record((1.0,))
    int8 = make_record((1.0, 10.0))
    int8["name"] = "wav2vec2-base-int8"
    int8["runtimes"]["audiodeploy-int8"] = {**int8["runtimes"]["audiodeploy"], "name": "audiodeploy-int8"}
    for case in int8["cases"]:
        case["runtimes"]["audiodeploy-int8"] = copy.deepcopy(case["runtimes"]["audiodeploy"])
    latency_table = load("generate_models_md").bench_summary([fp32, int8])
    one_second = [row for row in latency_table if row.startswith("| wav2vec2 base | 1 s |")]
    assert one_second == [
        "| wav2vec2 base | 1 s | 2026-11-29 | 241 ms (52) | 1,314 ms (53) | 346 ms | 170 ms | 0.183 | 0.697 | 1.42 |"
    ]
    assert any(row.startswith("| wav2vec2 base | 10 s |") for row in latency_table)


def test_models_md_puts_int8_fidelity_records_in_one_table():
    def record(variant: str, ours: list[float], theirs: list[float]) -> dict:
        figures = {
            "audiodeploy-int8": {"argmax_agreement": ours, "snr_db": [31.0, 31.2]},
            "onnxruntime-int8": {"argmax_agreement": theirs, "snr_db": [27.7, 27.5]},
        }
        return {
            "schema": "audiodeploy.int8-fidelity/1", "benchmark": "int8-fidelity", "name": f"wavlm-{variant}-int8-fidelity",
            "target": {"recipe": "wavlm", "variant": variant}, "keep_fp32": ["*.lm_head"],
            "machine": {"date": "2026-12-01T20:00:00+00:00"},
            "cases": [{"seconds": 10.0, "frames": 499, "seeds": [1, 2], "runtimes": figures}],
        }  # fmt: skip

    markdown = load("generate_models_md").render(
        [record("large", [0.968, 0.966], [0.980, 0.954]), record("base-plus", [0.9, 0.9], [0.8, 0.8])]
    )
    assert markdown.count("## int8 fidelity on more inputs") == 1
    assert (
        "| wavlm large | 10 s (499 frames) | 2026-12-01 | `*.lm_head` | 96.7% / 96.7% | 31.1 / 27.6 dB | 96.8 / 98.0, 96.6 / 95.4 |"
        in markdown
    )
    assert "| wavlm base-plus | 10 s (499 frames) |" in markdown


def test_models_md_puts_an_fp16_run_beside_fp32_with_its_time_size_fidelity_and_cpu():
    record = make_record((1.0,))
    record["name"] = "wav2vec2-base-fp16"
    runtimes = record["runtimes"]
    runtimes["audiodeploy-fp16"] = {
        **runtimes["audiodeploy"],
        "name": "audiodeploy-fp16",
        "program_bytes": runtimes["audiodeploy"]["program_bytes"] // 2,
    }
    (case,) = record["cases"]
    fp16 = copy.deepcopy(case["runtimes"]["audiodeploy"])
    fp16["latency"]["median_s"] *= 2
    fp16["snr_db_vs_eager"] = 58.04
    case["runtimes"]["audiodeploy-fp16"] = fp16
    generate = load("generate_models_md")
    (row,) = [r for r in generate.fp16_summary([record]) if r.startswith("| wav2vec2 base | 1 s |")]
    assert "| AMD EPYC (no) |" in row and row.endswith("| 2 | 0.5 | 58 dB |")
    record["machine"]["vector_extensions"] = ["avx2", "avx512_fp16"]
    assert "| AMD EPYC (yes) |" in generate.fp16_summary([record])[-2]
    assert "## fp16 beside fp32" in generate.render([record])


def test_models_md_puts_text_to_speech_in_one_table_with_the_real_time_factor():
    case = {
        "text": "sentence", "characters": 44, "sentences": 1, "speech_seconds": 4.576, "audiodeploy_ms": 1000.0,
        "eager_ms": 2000.0, "ratio": 0.5, "audiodeploy_rtf": 0.2186, "eager_rtf": 0.437, "max_abs_diff": 9e-6,
        "onnxruntime_ms": 1250.0, "onnxruntime_ratio": 0.8, "onnxruntime_rtf": 0.273,
    }  # fmt: skip
    record = {
        "benchmark": "tts", "recipe": "vits", "variant": "mms-tts", "weights": "synthetic (seed 0)",
        "machine": {"date": "2026-12-03T11:00:00+00:00", "processor": "AMD EPYC", "threads": 2},
        "methods": {"encode": {"delegates": 1}, "decode": {"delegates": 1}}, "cases": [case],
    }  # fmt: skip
    markdown = load("generate_models_md").render([record])
    assert markdown.count("## Text to speech, whole chain") == 1
    assert (
        "| vits mms-tts | sentence (1 sentence(s)) | 2026-12-03, AMD EPYC, 2 thread(s) | 1 / 1 | 4.6 s "
        "| 1,000 ms (0.219) | 2,000 ms (0.437) | 1,250 ms (0.273) | 0.500 | 0.800 | 9.0e-06 |" in markdown
    )


def test_models_md_puts_each_codec_method_beside_eager_and_onnx_runtime():
    machine = {"date": "2026-12-03T14:00:00+00:00", "processor": "AMD EPYC", "threads": 2}
    case = {
        "seconds": 1.0, "method": "decode", "audiodeploy_ms": 300.0, "eager_ms": 450.0, "onnxruntime_ms": 400.0,
        "ratio": 0.667, "onnxruntime_ratio": 0.75, "difference": "max abs diff 7.00e-04",
        "onnxruntime_difference": "max abs diff 2.00e-06",
    }  # fmt: skip
    older = {key: case[key] for key in ("seconds", "method", "audiodeploy_ms", "eager_ms", "ratio", "difference")}
    records = [
        {"benchmark": "codec-methods", "recipe": recipe, "variant": "16khz", "machine": machine,
         "methods": {"decode": {"delegates": 1}}, "cases": [measured]}
        for recipe, measured in (("dac", case), ("mimi", older))
    ]  # fmt: skip
    markdown = load("generate_models_md").render(records)
    assert markdown.count("## Codecs, method by method") == 1
    assert (
        "| dac 16khz | decode | 1 s | 2026-12-03, AMD EPYC, 2 thread(s) | 1 | 300 ms | 450 ms | 400 ms | 0.667 "
        "| 0.750 | max abs diff 7.00e-04 | max abs diff 2.00e-06 |" in markdown
    )
    # A record from before the ONNX Runtime column renders with dashes there.
    assert (
        "| mimi 16khz | decode | 1 s | 2026-12-03, AMD EPYC, 2 thread(s) | 1 | 300 ms | 450 ms | – | 0.667 | – |"
        in markdown
    )
    # A program of one window timed on a longer input says so.
    windowed = records[0] | {"window_seconds": 1.0, "cases": [case | {"seconds": 10.0, "windowed": True}]}
    assert "| dac 16khz | decode | 10 s, in 1 s windows | 2026-12-03" in load("generate_models_md").render([windowed])


def test_models_md_puts_codec_int8_fidelity_in_one_table_with_the_codes_that_moved():
    machine = {"date": "2026-12-07T15:00:00+00:00", "processor": "Intel(R) Xeon(R) Processor", "threads": 2}
    codec = {
        "benchmark": "codec-int8", "recipe": "mimi", "variant": "8-codebooks", "seconds": 2.5, "machine": machine,
        "cases": [
            {"seed": 10, "codes_differing": 27, "codes": 256, "decode_snr_db": 24.89, "decode_log_mel_distance": 0.0411},
            {"seed": 11, "codes_differing": 39, "codes": 256, "decode_snr_db": 24.91, "decode_log_mel_distance": 0.0412},
        ],
    }  # fmt: skip
    voice = codec | {"recipe": "vits", "variant": "mms-tts", "seconds": 1.0, "cases": [
        {"seed": 10, "decode_snr_db": 25.7, "decode_log_mel_distance": 0.0604},
    ]}  # fmt: skip
    markdown = load("generate_models_md").render([codec, voice])
    assert markdown.count("## Codecs and text to speech in int8") == 1
    assert (
        "| mimi 8-codebooks | 2 x 2.5 s | 2026-12-07, Intel(R) Xeon(R) Processor | 66 of 512 (13%) | 24.9, 24.9 dB "
        "| 0.041, 0.041 |" in markdown
    )
    assert (
        "| vits mms-tts | 1 x 1 s | 2026-12-07, Intel(R) Xeon(R) Processor | – (no encode) | 25.7 dB | 0.060 |"
        in markdown
    )


def test_models_md_puts_one_linear_layer_of_each_runtime_in_one_table():
    machine = {
        "date": "2026-12-07T03:16:54+00:00", "processor": "Intel(R) Xeon(R) Processor", "machine": "x86_64",
        "vector_extensions": ["avx512f", "avx512_fp16"], "cpu_count": 2, "torch": "2.14.1", "executorch": "1.5.1",
        "onnxruntime": "1.32.0", "command": "python benchmarks/gemm_kernels.py --name xeon",
    }  # fmt: skip
    case = {
        "threads": 2, "rows": 49, "in_features": 768, "out_features": 768, "gflop": 0.0578,
        "median_s": {"xnnpack": 0.00068, "onnxruntime": 0.00025, "torch": 0.0012},
        "gflops": {"xnnpack": 85.0, "onnxruntime": 231.2, "torch": 48.2},
    }  # fmt: skip
    markdown = load("generate_models_md").render([{"benchmark": "gemm-kernels", "machine": machine, "cases": [case]}])
    assert "## One fp32 linear layer" in markdown and "(avx512f, avx512_fp16)" in markdown
    assert "| 2 | 49 x 768 -> 768 | 85 | – | 231 | 48 | 2.72 |" in markdown  # a record from before the 1x1 column
    case["gflops"]["xnnpack-conv1x1"] = 80.4
    markdown = load("generate_models_md").render([{"benchmark": "gemm-kernels", "machine": machine, "cases": [case]}])
    assert "| 2 | 49 x 768 -> 768 | 85 | 80 | 231 | 48 | 2.72 |" in markdown
