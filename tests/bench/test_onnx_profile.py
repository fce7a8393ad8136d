"""ONNX Runtime's own profile, summed per operator type with the GEMMs' rate from the shapes it recorded."""

from __future__ import annotations

import tempfile

import pytest
import torch
from torch import nn
from torch.export import Dim

from audiodeploy.bench.onnx_profile import node_flops, onnx_profile
from audiodeploy.bench.runtimes import OnnxRuntime


def _node(kind: str, ts: int, dur: int, inputs: list[list[int]], output: list[int]) -> dict:
    return {
        "cat": "Node",
        "name": f"n{ts}_kernel_time",
        "ts": ts,
        "dur": dur,
        "args": {
            "op_name": kind,
            "input_type_shape": [{"float": shape} for shape in inputs],
            "output_type_shape": [{"float": output}],
        },
    }


def test_the_median_run_is_summed_per_operator_type():
    trace = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 1000},  # the warm-up run
        _node("MatMul", 10, 900, [[1, 50, 64], [64, 32]], [1, 50, 32]),
        {"cat": "Session", "name": "model_run", "ts": 2000, "dur": 100},
        _node("MatMul", 2010, 40, [[1, 50, 64], [64, 32]], [1, 50, 32]),
        _node("Gelu", 2060, 20, [[1, 50, 32]], [1, 50, 32]),
        {"cat": "Session", "name": "model_run", "ts": 3000, "dur": 200},
        _node("MatMul", 3010, 120, [[1, 50, 64], [64, 32]], [1, 50, 32]),
        _node("Gelu", 3150, 30, [[1, 50, 32]], [1, 50, 32]),
    ]
    profile = onnx_profile(trace, warmup=1)
    assert profile.engine == "onnxruntime" and profile.runs == 2
    assert profile.median_ms == pytest.approx(0.1)  # the lower median of two runs, 100 us
    matmul, gelu = profile.operators
    assert (matmul.name, matmul.calls, matmul.ms, matmul.share) == (
        "MatMul",
        1,
        pytest.approx(0.04),
        pytest.approx(0.4),
    )
    assert matmul.gflops == pytest.approx(2 * 50 * 32 * 64 / 40e3)
    assert gelu.gflops is None and gelu.share == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no run"):
        onnx_profile(trace, warmup=3)


def test_flops_of_a_convolution_and_a_transposed_one():
    assert (
        node_flops(
            "Conv",
            {
                "input_type_shape": [{"float": [1, 4, 100]}, {"float": [8, 2, 3]}],
                "output_type_shape": [{"float": [1, 8, 98]}],
            },
        )
        == 2 * 8 * 98 * 2 * 3
    )
    assert (
        node_flops(
            "ConvTranspose",
            {
                "input_type_shape": [{"float": [1, 8, 10]}, {"float": [8, 4, 4]}],
                "output_type_shape": [{"float": [1, 4, 22]}],
            },
        )
        == 2 * 80 * 16
    )
    assert node_flops("Add", {"input_type_shape": [{"float": [3]}], "output_type_shape": [{"float": [3]}]}) is None
    assert node_flops("MatMul", {"input_type_shape": ["junk"], "output_type_shape": [{"float": [3]}]}) is None


def test_a_session_profiles_itself_and_leaves_no_file(tmp_path, monkeypatch):
    module = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 16)).eval()
    x = torch.randn(1, 50, 64)
    runtime = OnnxRuntime(module, (x,), ({1: Dim("frames", min=2, max=200)},), threads=1, profile=True)
    runtime.load()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the profile's trace is written
    profile = runtime.profile((torch.randn(1, 120, 64),), runs=3, warmup=1)
    assert profile.runs == 3 and profile.median_ms > 0
    gemms = [o for o in profile.operators if o.gflops is not None]
    assert gemms and all(o.name in ("MatMul", "FusedMatMul", "Gemm") for o in gemms)
    assert sum(o.share for o in profile.operators) <= 1.0
    assert profile.gemm_gflops is not None and profile.gemm_gflops > 0
    assert list(tmp_path.iterdir()) == []
