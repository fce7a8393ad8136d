"""Flips, splits, slices and GLUs along the channels of a signal as 1x1 convolutions: one delegate at any length."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.channel_selections_as_convolutions import ChannelSelectionsAsConvolutionsPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten, op_counts

FRAMES = Dim("frames", min=4, max=64)
REWRITE = "ChannelSelectionsAsConvolutionsPass"
SELECTIONS_LEFT = {
    "aten.flip.default": 0,
    "aten.split.Tensor": 0,
    "aten.split_with_sizes.default": 0,
    "aten.slice.Tensor": 0,
    "aten.glu.default": 0,
}


class ReversedCouplingFlow(torch.nn.Module):
    """One step of VITS's flow, reversed: flip the channels, split them into halves; a gated convolution (GLU) of
    the first half, then one convolution whose output is split into the mean and log-scale of the second."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.half = channels // 2
        self.pre = torch.nn.Conv1d(self.half, channels, 3, padding=1)
        self.post = torch.nn.Conv1d(self.half, channels, 1)

    def forward(self, x):
        first, second = torch.split(torch.flip(x, [1]), [self.half, self.half], 1)
        hidden = F.glu(self.pre(first), dim=1)
        mean, log_scale = torch.chunk(self.post(hidden), 2, dim=1)
        return torch.cat([first, (second - mean) * torch.exp(-log_scale)], 1)


def convolutions(program) -> int:
    counts = op_counts(program)
    return counts["aten.conv1d.default"] + counts["aten.conv2d.default"]


def flow_cases() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, 8, n),) for n in (20, 4, 64)]


def test_fp32_flow_with_flip_split_and_glu_over_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    cases = flow_cases()
    stock, report = lower_stock_and_rewritten(
        ReversedCouplingFlow().eval(), cases[0], REWRITE, dynamic_shapes=({2: FRAMES},), also_run=cases[1:]
    )
    assert stock.delegates > 1, stock
    assert stock.ops_outside_delegates["aten.flip"] == 1 and stock.ops_outside_delegates["aten.slice_copy"] == 2
    assert stock.ops_outside_delegates["aten.split_with_sizes_copy"] == 2, stock


def test_fp32_selections_of_convolutions_are_the_convolutions_cut_and_exact():
    torch.manual_seed(0)
    # The flip and its split: two selections of x (the flip's permutation cut in halves). The GLU's convolution
    # and the split one: each cut in two. No convolution more than the pieces need.
    rewritten = assert_rewrites(
        ReversedCouplingFlow().eval(), flow_cases(), REWRITE, SELECTIONS_LEFT, dynamic_shapes=({2: FRAMES},), atol=1e-6
    )
    assert convolutions(rewritten.program) == 6
    # The cut convolutions' weights are gone, and so is the permutation's: only the pieces' weights are stored.
    assert [n.name for n in rewritten.program.graph.nodes if n.op == "placeholder" and not n.users] == []


class Picks(torch.nn.Module):
    """Channel slices and a chunk of the input itself (nothing to cut): selection convolutions."""

    def forward(self, x):
        low, high = torch.chunk(x, 2, dim=1)
        return torch.cat([x[:, 2:6] * 2.0, x[:, ::3], x[:, -3:], high - low, torch.flip(x, [1])], 1)


def test_fp32_selections_of_an_input_are_one_hot_convolutions():
    cases = [(torch.randn(1, 8, n),) for n in (20, 4, 64)]
    rewritten = assert_rewrites(Picks(), cases, REWRITE, SELECTIONS_LEFT, dynamic_shapes=({2: FRAMES},))
    assert convolutions(rewritten.program) == 6


class StaticSplit(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.split(x, [1, 3, 4], dim=1)
        d, e = torch.chunk(x, 2, dim=0)
        return c * 2.0, a + b[:, :1], d - e


def test_fp32_split_of_a_static_tensor_is_slices_along_any_dimension():
    # A static split along the last dimension is split_as_linears's (it runs first).
    counts = {"aten.split_with_sizes.default": 0, "aten.split.Tensor": 0, "aten.slice.Tensor": 6}
    assert_rewrites(StaticSplit(), [(torch.randn(2, 8, 5),)], REWRITE, counts | {"aten.conv1d.default": 0})


class NotChannels(torch.nn.Module):
    def forward(self, x):
        along_time = torch.flip(x, [2]), torch.chunk(x.transpose(1, 2), 2, dim=2)[0], x[:, 1:3, :3]
        return *along_time, torch.flip(x.unsqueeze(2), [1])


def test_leaves_selections_along_time_with_their_reasons():
    ep = export_aten(NotChannels(), (torch.randn(1, 4, 20),), dynamic_shapes=({2: FRAMES},))
    rewrite = ChannelSelectionsAsConvolutionsPass(ep)
    rewrite(ep.graph_module)
    reasons = {reason for _, reason in rewrite.skipped}
    assert reasons == {
        "it flips a dimension whose size depends on the input length",
        "it picks along another dimension than the channels (dim 1)",
        "not a float32 tensor of 3 dimensions",  # 4-D: attention heads are another pass's
    }, rewrite.skipped
    # x[:, 1:3, :3] is two slices: the channel slice of x is a selection, the time slice of its result stays.
    assert (op_counts(ep)["aten.slice.Tensor"], op_counts(ep)["aten.conv1d.default"]) == (1, 1)


def test_leaves_a_static_channel_slice_to_xnnpack():
    ep = export_aten(Picks(), (torch.randn(1, 8, 20),))
    rewrite = ChannelSelectionsAsConvolutionsPass(ep)
    rewrite(ep.graph_module)
    assert "the tensor's shape is static: XNNPACK slices it" in {reason for _, reason in rewrite.skipped}


class GatedWeightNormLayer(torch.nn.Module):
    """A layer of VITS's WaveNet: convolutions with weight norm whose outputs are picked in halves, the gate's tanh
    and sigmoid halves and the residual and skip halves."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        weight_norm = torch.nn.utils.parametrizations.weight_norm
        self.channels = channels
        self.gate = weight_norm(torch.nn.Conv1d(channels, 2 * channels, 3, padding=1))
        self.res_skip = weight_norm(torch.nn.Conv1d(channels, 2 * channels, 1))

    def forward(self, x):
        gate = self.gate(x)
        acts = torch.tanh(gate[:, : self.channels]) * torch.sigmoid(gate[:, self.channels :])
        res_skip = self.res_skip(acts)
        return torch.cat([x + res_skip[:, : self.channels], res_skip[:, self.channels :]], 1)


def test_fp32_halves_of_weight_normed_convolutions_are_the_convolutions_cut_each_folded():
    torch.manual_seed(0)
    cases = [(torch.randn(1, 4, n),) for n in (20, 4, 64)]
    # Each convolution cut in two, each piece with its own weight norm, which the fold folds: no selection.
    rewritten = assert_rewrites(
        GatedWeightNormLayer().eval(),
        cases,
        REWRITE,
        SELECTIONS_LEFT | {"aten._weight_norm.default": 0},
        dynamic_shapes=({2: FRAMES},),
        atol=1e-6,
    )
    assert convolutions(rewritten.program) == len(rewritten.folds) == 4
    assert [n.name for n in rewritten.program.graph.nodes if n.op == "placeholder" and not n.users] == []


def test_fp32_weight_normed_gated_layer_over_dynamic_length_is_one_delegate_with_its_pieces_folded():
    torch.manual_seed(0)
    cases = [(torch.randn(1, 4, n),) for n in (20, 4, 64)]
    stock, report = lower_stock_and_rewritten(
        GatedWeightNormLayer().eval(), cases[0], REWRITE, dynamic_shapes=({2: FRAMES},), also_run=cases[1:]
    )
    assert stock.ops_outside_delegates["aten.slice_copy"] == 4, stock
    assert len(report.folds) == 4, report.folds


class FlipsOfOneEntry(torch.nn.Module):
    """Flips of dimensions of one entry: the channels of a mono signal, a batch of one, a 4-D image's row."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(torch.flip(x, [1]))
        return torch.flip(y, [0]) * 2.0 + torch.flip(x.unsqueeze(2), [1, -2]).squeeze(2)


def test_fp32_flips_of_dimensions_of_one_entry_are_dropped():
    cases = [(torch.randn(1, 1, n),) for n in (20, 4, 64)]
    stock, _ = lower_stock_and_rewritten(
        FlipsOfOneEntry().eval(), cases[0], REWRITE, dynamic_shapes=({2: FRAMES},), also_run=cases[1:]
    )
    assert stock.ops_outside_delegates["aten.flip"] == 3, stock
    assert_rewrites(FlipsOfOneEntry().eval(), cases, REWRITE, {"aten.flip.default": 0}, dynamic_shapes=({2: FRAMES},))
