"""A straight-through estimator's detach, a slice of a whole dimension, a concatenation of one tensor and a repeat
once, dropped: one delegate instead of two around an alias_copy, a cat or a repeat."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.drop_aliases import DropAliasesPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class StraightThrough(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.before = torch.nn.Conv1d(3, 3, 1)
        self.after = torch.nn.Conv1d(3, 3, 1)

    def forward(self, x):
        latents = self.before(x)
        quantized = torch.floor(latents)
        return self.after(latents + (quantized - latents).detach())


def test_fp32_straight_through_estimator_is_one_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        StraightThrough().eval(),
        (torch.randn(1, 3, 20),),
        "DropAliasesPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 3, 4),), (torch.randn(1, 3, 64),)],
    )
    assert "aten.alias_copy" in stock.ops_outside_delegates, stock


class WholeSliceOfPadded(torch.nn.Module):
    """EnCodec's _pad1d: the padded signal cut back by the extra padding, which is none: an ``alias`` of it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 3, 3)

    def forward(self, x):
        padded = torch.nn.functional.pad(x, (2, 0))
        return self.conv(padded[..., : padded.shape[-1] - 0])


def test_fp32_a_slice_of_a_whole_dimension_is_one_delegate():
    torch.manual_seed(0)
    program = export_aten(WholeSliceOfPadded().eval(), (torch.randn(1, 3, 20),))
    assert "aten.alias.default" in {str(n.target) for n in program.graph.nodes}  # what export makes of it
    lower_stock_and_rewritten(
        WholeSliceOfPadded().eval(), (torch.randn(1, 3, 20),), "DropAliasesPass", also_run=[(torch.randn(1, 3, 20),)]
    )


class ConcatenationOfOne(torch.nn.Module):
    """A residual quantizer with one codebook: its codes concatenated from a list of one."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 3, 1)

    def forward(self, x):
        return torch.tanh(torch.cat([self.conv(x)], dim=1))


def test_fp32_a_concatenation_of_one_tensor_is_one_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        ConcatenationOfOne().eval(),
        (torch.randn(1, 3, 20),),
        "DropAliasesPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 3, 4),)],
    )
    assert "aten.cat" in stock.ops_outside_delegates, stock


class RepeatedOncePerBatch(torch.nn.Module):
    """SEW-D's position keys, repeated over ``batch // heads`` (1 here) before the bmm with the queries' heads."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 1)

    def forward(self, x):
        heads = self.conv(x)  # [2, 4, T]: 2 heads of one utterance
        keys = torch.tanh(heads).repeat(x.size(0) // 2, 1, 1)
        return torch.bmm(heads.transpose(1, 2), keys)


def test_fp32_a_repeat_once_is_one_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        RepeatedOncePerBatch().eval(),
        (torch.randn(2, 4, 20),),
        "DropAliasesPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(2, 4, 4),)],
    )
    assert "aten.repeat" in stock.ops_outside_delegates, stock


class Repeated(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x.repeat(1, 2)) + torch.tanh(x.repeat(1, 1, 1)).squeeze(0).repeat(1, 2)


def test_leaves_a_repeat_that_repeats_or_adds_a_dimension_with_its_reason():
    ep = export_aten(Repeated(), (torch.randn(2, 3),))
    rewrite = DropAliasesPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "repeat(1, 1, 1) repeats a dimension or adds one",
        "repeat(1, 2) repeats a dimension or adds one",
        "repeat(1, 2) repeats a dimension or adds one",
    ], rewrite.skipped


class Returned(torch.nn.Module):
    def forward(self, x):
        return (x * 2).detach()


def test_leaves_a_returned_detach_with_its_reason():
    ep = export_aten(Returned(), (torch.randn(2, 3),))
    rewrite = DropAliasesPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == ["the program returns it"], rewrite.skipped


class ResidualUnit(torch.nn.Module):
    """Mimi's residual unit: causal padding before each convolution, by 2 before the kernel-3 one and by 0 (kernel
    minus stride) before the kernel-1 one."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = torch.nn.Conv1d(4, 2, 3)
        self.narrow = torch.nn.Conv1d(2, 4, 1)

    def forward(self, x):
        hidden = torch.nn.functional.elu(self.wide(torch.nn.functional.pad(torch.nn.functional.elu(x), (2, 0))))
        return x + self.narrow(torch.nn.functional.pad(hidden, (0, 0)))


def test_a_padding_by_nothing_is_dropped_and_the_convolutions_it_parted_run_as_one_image():
    cases = [(torch.randn(1, 4, n),) for n in (20, 8, 64)]
    result = assert_rewrites(
        ResidualUnit().eval(), cases, "DropAliasesPass", {"aten.pad.default": 1}, dynamic_shapes=({2: FRAMES},)
    )
    assert "ConvChainsAsImagesPass" in result.changed
    report = lower_and_compare(ResidualUnit().eval(), cases[0], dynamic_shapes=({2: FRAMES},), also_run=cases[1:])
    assert report.delegates == 1 and not report.ops_outside_delegates


class SnakeResidualUnit(torch.nn.Module):
    """DAC's residual unit: its Snake activation reshapes ``[N, C, T]`` to ``[N, C, -1]`` (the shape it has) and
    back around ``x + sin(alpha x)^2 / alpha``."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = torch.nn.Conv1d(4, 4, 7, padding=3)
        self.narrow = torch.nn.Conv1d(4, 4, 1)
        self.alpha = torch.nn.Parameter(torch.rand(1, 4, 1) + 0.5)

    def snake(self, x):
        shape = x.shape
        x = x.reshape(shape[0], shape[1], -1)
        x = x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)
        return x.reshape(shape)

    def forward(self, x):
        return x + self.narrow(self.snake(self.wide(self.snake(x))))


def test_a_reshape_to_its_own_shape_is_dropped_and_the_convolutions_it_parted_run_as_one_image():
    cases = [(torch.randn(1, 4, n),) for n in (20, 8, 64)]
    # three views left: the image's entry and exit, and the second Snake's 1 / alpha given the image's dimension
    counts = {"aten.view.default": 3, "aten.conv2d.default": 2}
    result = assert_rewrites(
        SnakeResidualUnit().eval(), cases, "DropAliasesPass", counts, dynamic_shapes=({2: FRAMES},)
    )
    assert "ConvChainsAsImagesPass" in result.changed
    ep = export_aten(SnakeResidualUnit().eval(), cases[0], dynamic_shapes=({2: FRAMES},))
    rewrite = DropAliasesPass(ep)
    assert rewrite(ep.graph_module).modified
    assert len(rewrite.rewritten) == 4  # the two reshapes of each Snake
