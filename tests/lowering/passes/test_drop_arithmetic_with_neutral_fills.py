"""Additions of zeros, products by ones (and their kin) dropped: the convolutions they hid are cut, not selected."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.drop_arithmetic_with_neutral_fills import DropArithmeticWithNeutralFillsPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten, op_counts

FRAMES = Dim("frames", min=4, max=64)
REWRITE = "DropArithmeticWithNeutralFillsPass"


class UnconditionedCoupling(torch.nn.Module):
    """VITS's reversed coupling layer on one utterance, without speaker conditioning: an all-ones padding mask made
    from the input, a WaveNet gate that adds ``zeros_like``, a skip sum started from ``zeros_like`` and a zero
    log-scale."""

    def __init__(self, half: int = 4) -> None:
        super().__init__()
        self.half = half
        self.pre = torch.nn.Conv1d(half, half, 1)
        self.gate = torch.nn.Conv1d(half, 2 * half, 3, padding=1)
        self.skip = torch.nn.Conv1d(half, half, 1)
        self.post = torch.nn.Conv1d(half, half, 1)

    def forward(self, x):
        mask = torch.ones_like(x[:, :1])
        first, second = x[:, : self.half], x[:, self.half :]
        hidden = self.pre(first) * mask
        gate = self.gate(hidden)
        gate = gate + torch.zeros_like(gate)
        acts = torch.tanh(gate[:, : self.half]) * torch.sigmoid(gate[:, self.half :])
        skip = torch.zeros_like(hidden) + self.skip(acts)
        mean = self.post(skip * mask) * mask
        log_scale = torch.zeros_like(mean)
        return torch.cat([first, (second - mean) * torch.exp(-log_scale) * mask], 1)


def flow_cases() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, 8, n),) for n in (20, 4, 64)]


def test_fp32_coupling_with_neutral_fills_over_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    cases = flow_cases()
    lower_stock_and_rewritten(
        UnconditionedCoupling().eval(), cases[0], REWRITE, dynamic_shapes=({2: FRAMES},), also_run=cases[1:]
    )


def test_fp32_neutral_fills_are_dropped_and_the_gate_convolution_is_cut():
    torch.manual_seed(0)
    rewritten = assert_rewrites(
        UnconditionedCoupling().eval(),
        flow_cases(),
        REWRITE,
        # Left: the gate's tanh * sigmoid. Gone: the products by the mask, the zeros added, exp(-zeros) and its product.
        {"aten.mul.Tensor": 1, "aten.add.Tensor": 0, "aten.exp.default": 0, "aten.clamp.default": 0},
        dynamic_shapes=({2: FRAMES},),
    )
    # pre, the gate cut in halves, skip, post; and the two halves of x, picked from the input by one-hot convolutions.
    counts = op_counts(rewritten.program)
    assert counts["aten.conv1d.default"] + counts["aten.conv2d.default"] == 7, counts


class NeutralForms(torch.nn.Module):
    def forward(self, x):
        y = x * 2.0
        return torch.cat(
            [
                y + torch.zeros_like(y),
                torch.full_like(y, 0.0) + y,
                y - y.new_zeros(y.shape),
                torch.add(y, torch.zeros_like(y), alpha=3),
                y * torch.ones_like(y[:, :1]),
                torch.ones(1, 1, y.shape[2]) * y,
                y / y.new_full(y.shape, 1.0),
                y * torch.exp(-torch.zeros_like(y)),
                y * torch.ones_like(y).bool(),  # EnCodec's mask when it is given none: all true
                y + torch.full_like(y, 0.25).to(torch.int64),  # zeros once cast
            ],
            1,
        )


def test_fp32_every_neutral_form_returns_the_other_operand():
    cases = [(torch.randn(1, 3, n),) for n in (20, 4, 64)]
    counts = {"aten.add.Tensor": 0, "aten.sub.Tensor": 0, "aten.mul.Tensor": 1, "aten.div.Tensor": 0}
    assert_rewrites(NeutralForms(), cases, REWRITE, counts, dynamic_shapes=({2: FRAMES},))


class NotNeutral(torch.nn.Module):
    def forward(self, x):
        zeros = torch.zeros_like(x)
        return (
            x[:, :1] * torch.ones_like(x),  # the ones broadcast x
            x.to(torch.int32) + zeros,  # the zeros promote it
            torch.add(zeros, x, alpha=2.0),  # 2 x
            zeros - x,  # -x
            x * torch.full_like(x, 2.0),
            x * torch.zeros_like(x).bool(),  # an all-false mask zeroes x
        )


def test_leaves_arithmetic_that_is_not_the_other_operand_with_its_reasons():
    ep = export_aten(NotNeutral(), (torch.randn(1, 4, 20),), dynamic_shapes=({2: FRAMES},))
    rewrite = DropArithmeticWithNeutralFillsPass(ep)
    rewrite(ep.graph_module)
    assert {reason for _, reason in rewrite.skipped} == {
        "the fill broadcasts or promotes the result: it is not the other operand's shape and dtype",
        "it scales the other operand by alpha 2.0",
        "its second operand is not a tensor filled with 0",
        "neither operand is a tensor filled with 1",
    }, rewrite.skipped
    assert rewrite.rewritten == []
