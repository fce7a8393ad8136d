"""The one results schema, its terminal table, and the chart."""

from __future__ import annotations

import pytest

from audiodeploy.bench.plot import render_png
from audiodeploy.bench.results import SCHEMA, SchemaError, format_table, read_json, write_json
from audiodeploy.bench.timing import latency_dict


def _figures(median: float, load: float | None = 0.01, diff: float | None = 1e-6) -> dict:
    return {
        "load_s": load,
        "peak_rss_bytes": 50 * 2**20,
        "rtf": median / 1.0,
        "max_abs_diff_vs_eager": diff,
        "notes": [],
        "latency": latency_dict([median * 0.9, median, median * 1.2], warmup=1),
    }


def make_record(lengths=(1.0,)) -> dict:
    runtimes = {
        "audiodeploy": {
            "name": "audiodeploy",
            "label": "audiodeploy",
            "engine": "executorch",
            "delegates": 52,
            "ops_outside_delegates": {"aten.native_layer_norm": 25},
            "program_bytes": 378 * 2**20,
            "prepare_s": 80.0,
            "notes": [],
            "lowering_report": None,
        },
        "stock": {
            "name": "stock",
            "label": "stock ExecuTorch lowering",
            "engine": "executorch",
            "delegates": 53,
            "ops_outside_delegates": {"aten.convolution": 1},
            "program_bytes": 378 * 2**20,
            "prepare_s": 85.0,
            "notes": [],
            "lowering_report": None,
        },
        "eager": {
            "name": "eager",
            "label": "eager PyTorch",
            "engine": "pytorch",
            "delegates": None,
            "ops_outside_delegates": None,
            "program_bytes": 377 * 2**20,
            "prepare_s": None,
            "notes": [],
            "lowering_report": None,
        },
        "onnxruntime": {
            "name": "onnxruntime",
            "label": "ONNX Runtime 1.32.0",
            "engine": "onnxruntime",
            "delegates": None,
            "ops_outside_delegates": None,
            "program_bytes": 378 * 2**20,
            "prepare_s": 30.0,
            "notes": [],
            "lowering_report": None,
        },
    }
    medians = {"audiodeploy": 0.241, "stock": 1.314, "eager": 0.346, "onnxruntime": 0.170}
    cases = []
    for seconds in lengths:
        figures = {
            n: _figures(m * seconds, load=None if n == "eager" else 0.1, diff=0.0 if n == "eager" else 1e-5)
            for n, m in medians.items()
        }
        cases.append(
            {
                "seconds": seconds,
                "audio_seconds": seconds,
                "input_length": int(16000 * seconds),
                "input_shape": [1, int(16000 * seconds)],
                "runtimes": figures,
                "ratios": {
                    f"audiodeploy/{n}": medians["audiodeploy"] / m for n, m in medians.items() if n != "audiodeploy"
                },
                "paired_ratios": {},
            }
        )
    return {
        "schema": SCHEMA,
        "benchmark": "bench",
        "name": "wav2vec2-base",
        "target": {
            "kind": "recipe",
            "recipe": "wav2vec2",
            "variant": "base",
            "source": "transformers",
            "weights": "synthetic (seed 0)",
            "parameters": 94_000_000,
            "path": None,
            "sample_rate": 16000,
            "input_kind": "waveform",
            "length_range_seconds": [1, 10],
        },
        "transport": {
            "kind": "local",
            "runtime": "ExecuTorch Python runtime (portable_lib) in the benchmarking process",
        },
        "settings": {
            "runs": 3,
            "warmup": 1,
            "stock_runs": 3,
            "stock_warmup": 1,
            "threads": 2,
            "seed": 0,
            "compare": ["stock", "eager", "onnxruntime"],
        },
        "machine": {
            "date": "2026-11-29T16:00:00+00:00",
            "command": "audiodeploy bench wav2vec2",
            "platform": "Linux-6.8.0-x86_64-with-glibc2.39",
            "machine": "x86_64",
            "processor": "AMD EPYC",
            "vector_extensions": ["avx2", "fma"],
            "cpu_count": 2,
            "threads": 2,
            "load_average": [0.5, 0.4, 0.3],
            "omp_wait_policy": "PASSIVE",
            "python": "3.11.7",
            "torch": "2.14.1",
            "executorch": "1.5.1",
            "onnxruntime": "1.32.0",
            "audiodeploy": "0.1.0",
            "source_tree": {"commit": "0123456789abcdef", "uncommitted_changes": False},
        },
        "baseline": "audiodeploy",
        "runtimes": runtimes,
        "cases": cases,
        "ratios_note": "",
        "memory_note": "",
    }


def test_a_complete_record_validates_and_round_trips(tmp_path):
    record = make_record((1.0, 10.0))
    write_json(tmp_path / "r.json", record)
    assert read_json(tmp_path / "r.json") == record


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: r.update(schema="other/1"), "schema is 'other/1'"),
        (lambda r: r["cases"][0]["ratios"].pop("audiodeploy/onnxruntime"), "expected"),
        (lambda r: r["cases"][0]["runtimes"].pop("stock"), "measured"),
        (lambda r: r["cases"][0]["runtimes"]["eager"]["latency"].pop("p90_s"), "latency.p90_s"),
        (lambda r: r.update(cases=[]), "no cases"),
    ],
)
def test_an_incomplete_record_is_refused_and_not_written(tmp_path, damage, message):
    record = make_record()
    damage(record)
    with pytest.raises(SchemaError, match=message):
        write_json(tmp_path / "r.json", record)
    assert not (tmp_path / "r.json").exists()


def test_table_shows_every_runtime_and_the_ratio_in_words():
    table = format_table(make_record())
    for name in ("audiodeploy", "stock", "eager", "onnxruntime"):
        assert f"\n{name} " in table
    assert "0.183 (audiodeploy 5.45x faster)" in table
    assert "1.418 (audiodeploy 1.42x slower)" in table
    assert "52 delegate(s)" in table and "native_layer_norm x25" in table


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_chart_of_one_length_is_a_png_with_a_bar_per_runtime():
    width, height = _png_size(render_png(make_record()))
    assert width > 400 and height > 200


def test_chart_of_several_lengths_is_a_png():
    width, height = _png_size(render_png(make_record((1.0, 5.0, 10.0))))
    assert width > 400 and height > 300
