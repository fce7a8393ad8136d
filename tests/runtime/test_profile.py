"""`profile_program`: ExecuTorch's event trace of a real lowered program, summed per operator kind and per layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import audiodeploy
from audiodeploy.runtime.profile import SETUP, GemmSites, format_profile, layer_of, profile_program

FRAMES = 200
WIDTH = 256
"""Large enough that each GEMM takes microseconds: XNNPACK's profiler counts whole microseconds."""


class Block(nn.Module):
    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.dense(x))


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(WIDTH, 2 * WIDTH), Block(2 * WIDTH, 32)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x.softmax(-1)


@pytest.fixture(scope="module")
def lowered():
    torch.manual_seed(0)
    module = TwoLayers().eval()
    x = torch.randn(1, 8, WIDTH)
    return audiodeploy.lower(module, (x,), dynamic_shapes=({1: Dim("frames", min=2, max=400)},))


def _gemms(lowered) -> GemmSites:
    sites = GemmSites.from_report(lowered.report.to_dict()["methods"]["forward"])
    assert sites is not None
    return sites


def test_each_gemm_has_its_layer_its_time_and_its_flops(lowered):
    profile = profile_program(lowered.buffer, [torch.randn(1, FRAMES, WIDTH)], runs=3, gemms=_gemms(lowered))
    kinds = {o.name: o for o in profile.operators}
    gemm = kinds["Fully Connected (NC, F32) GEMM"]
    assert gemm.calls == 2 and gemm.ms > 0
    expected_flops = 2 * FRAMES * (WIDTH * 2 * WIDTH + 2 * WIDTH * 32)
    assert gemm.gflops == pytest.approx(expected_flops / (gemm.ms * 1e6))
    assert profile.gemm_gflops == pytest.approx(gemm.gflops)
    assert "Softmax (NC, F32)" in kinds and SETUP in kinds
    assert [layer.name for layer in profile.layers] == ["layers.0", "layers.1", SETUP]
    # The softmax after the last GEMM counts with layers.1: its GEMM, its GELU and the softmax.
    assert [layer.calls for layer in profile.layers[:2]] == [2, 3]
    assert sum(o.share for o in profile.operators) <= 1.0 + 1e-9
    assert profile.runs == 3 and profile.median_ms >= sum(o.ms for o in profile.operators) * 0.5
    text = format_profile(profile, "two layers")
    assert "Fully Connected (NC, F32) GEMM" in text and "layers.1" in text


def test_a_report_that_does_not_match_the_program_gives_no_layers_and_says_why(lowered):
    sites = _gemms(lowered)
    wrong = GemmSites([0, 0, 0], [*sites.modules, "extra"], [*sites.flops, 1], sites.symbols)
    profile = profile_program(lowered.buffer, [torch.randn(1, FRAMES, WIDTH)], runs=1, gemms=wrong)
    assert profile.layers == () and profile.gemm_gflops is None
    assert any("ran 2 GEMM operators where the lowering report lists 3" in note for note in profile.notes)

    bare = profile_program(lowered.buffer, [torch.randn(1, FRAMES, WIDTH)], runs=1, gemms=None)
    assert bare.layers == () and any("no lowering report" in note for note in bare.notes)
    assert {o.name for o in bare.operators} == {o.name for o in profile.operators}


def test_a_damaged_gemm_list_is_no_list():
    assert GemmSites.from_report({"delegated_gemms": [{"delegate": "x"}], "size_symbols": {}}) is None
    assert GemmSites.from_report({"delegated_gemms": "nonsense"}) is None
    assert GemmSites.from_report({}) is None


def test_a_layer_is_the_path_up_to_its_index():
    assert layer_of("model.encoder.layers.3.attention.q_proj") == "model.encoder.layers.3"
    assert layer_of("model.lm_head") == "model.lm_head"
