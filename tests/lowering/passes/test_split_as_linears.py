"""Splits along the last dimension, written as linears: a packed projection's pieces, a narrow gate's halves."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.split_as_linears import SplitAsLinearsPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class PackedProjection(torch.nn.Module):
    """torchaudio's nn.MultiheadAttention input projection: one [3C, C] linear, split into q, k, v."""

    def __init__(self) -> None:
        super().__init__()
        self.in_proj = torch.nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.in_proj(x).split(16, dim=-1)
        return q * k + v


class Gate(torch.nn.Module):
    """WavLM's gate: sigmoid of a narrow projection, chunked in two."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 2)

    def forward(self, x):
        a, b = torch.sigmoid(self.proj(x)).chunk(2, dim=-1)
        return x * (a * (b - 1.0) + 2.0)


class WideSplitOfActivation(torch.nn.Module):
    def forward(self, x):
        first, second = torch.relu(x).split([40, 24], dim=-1)
        return first.sum(-1) + second.sum(-1)


def ends() -> list[tuple[torch.Tensor]]:
    """Inputs at the shortest and the longest length of ``FRAMES``."""
    return [(torch.randn(1, 4, 16),), (torch.randn(1, 64, 16),)]


def stored_bytes(program) -> int:
    """The bytes lowering stores of ``program``: to_edge drops a parameter nothing reads, but keeps every lifted
    constant (see ``NodeRewritePass.call``); a view counted as its own."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    tensors = [
        program.state_dict[spec.target] if spec.target in program.state_dict else program.constants[spec.target]
        for spec in program.graph_signature.input_specs
        if spec.target is not None and (placeholders[spec.arg.name].users or spec.target in program.constants)
    ]
    return sum(t.numel() * t.element_size() for t in tensors)


def test_fp32_packed_projection_becomes_three_linears_in_one_delegate():
    torch.manual_seed(0)
    module = PackedProjection().eval()
    x = torch.randn(1, 10, 16)
    stock, _ = lower_stock_and_rewritten(
        module, (x,), "SplitAsLinearsPass", dynamic_shapes=({1: FRAMES},), also_run=[(torch.randn(1, 64, 16),)]
    )
    assert "aten.split_with_sizes_copy" in stock.ops_outside_delegates


def test_fp32_packed_weight_is_stored_once_in_its_pieces():
    torch.manual_seed(0)
    module = PackedProjection().eval()
    x = torch.randn(1, 10, 16)
    counts = {"aten.split.Tensor": 0, "aten.linear.default": 3}
    result = assert_rewrites(module, [(x,), *ends()], "SplitAsLinearsPass", counts, dynamic_shapes=({1: FRAMES},))
    packed_bytes = (48 * 16 + 48) * 4
    assert stored_bytes(result.program) < stored_bytes(export_aten(module, (x,))) + packed_bytes // 2


def test_fp32_narrow_gate_split_is_selected_by_linears():
    torch.manual_seed(0)
    cases = [(torch.randn(1, 10, 16),), *ends()]
    # The gate's projection, and a selecting linear per half.
    counts = {"aten.split.Tensor": 0, "aten.linear.default": 3}
    assert_rewrites(Gate().eval(), cases, "SplitAsLinearsPass", counts, dynamic_shapes=({1: FRAMES},))


def test_does_nothing_on_a_wide_split_of_an_activation_or_a_split_elsewhere():
    ep = export_aten(WideSplitOfActivation(), (torch.randn(1, 10, 64),))
    assert not SplitAsLinearsPass(ep)(ep.graph_module).modified

    class SplitOverTime(torch.nn.Module):
        def forward(self, x):
            first, second = x.split(5, dim=1)
            return first * second

    ep = export_aten(SplitOverTime(), (torch.randn(1, 10, 2),))
    assert not SplitAsLinearsPass(ep)(ep.graph_module).modified
