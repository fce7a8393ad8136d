"""The tanh-approximated GELU, written in PyTorch's ops (XNNPACK 1.5.1 would compute the erf GELU): one delegate."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.tanh_gelu_as_tanh import TanhGeluAsTanhPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class ConvTanhGeluConv(torch.nn.Module):
    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(channels, channels, 3, padding=1)
        self.second = torch.nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        return self.second(torch.nn.functional.gelu(self.first(x), approximate="tanh"))


def test_fp32_tanh_gelu_over_dynamic_length_is_one_delegate_with_eagers_numbers():
    torch.manual_seed(0)
    stock, report = lower_stock_and_rewritten(
        ConvTanhGeluConv().eval(),
        (3 * torch.randn(1, 8, 20),),
        "TanhGeluAsTanhPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(3 * torch.randn(1, 8, 4),), (3 * torch.randn(1, 8, 64),)],
    )
    # ExactGeluConfig declines it: 1.5.1 would delegate it and compute the erf GELU.
    assert stock.delegates == 2 and stock.ops_outside_delegates == {"aten.gelu": 1}, stock
    # The convolutions around it are one chain on one image: the gelu was one op when the chain passes ran.
    assert "ConvChainsAsImagesPass" in report.rewrites


class Gelus(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh") + torch.nn.functional.gelu(x * 2.0)


def test_fp32_tanh_gelu_is_tanh_products_and_sums_and_the_erf_gelu_stays():
    # Far out on both sides too: the 1 + tanh of a large negative x cancels, in PyTorch's kernel as here.
    cases = [(torch.linspace(-12.0, 12.0, 40).view(1, 2, 20),), (3 * torch.randn(1, 2, 4),)]
    counts = {"aten.gelu.default": 1, "aten.tanh.default": 1}
    rewritten = assert_rewrites(Gelus(), cases, "TanhGeluAsTanhPass", counts, dynamic_shapes=({2: FRAMES},))
    (gelu,) = [node for node in rewritten.program.graph.nodes if node.target == torch.ops.aten.gelu.default]
    assert gelu.kwargs.get("approximate", "none") == "none"


def test_does_nothing_on_the_erf_gelu():
    ep = export_aten(torch.nn.GELU().eval(), (torch.randn(1, 2, 8),))
    rewrite = TanhGeluAsTanhPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == ["the erf GELU, which XNNPACK computes"]
