"""ELU and GELU in the partitioner: stock 1.5.1 leaves every ELU outside and computes a tanh GELU as the erf GELU."""

from __future__ import annotations

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch.export import Dim

from audiodeploy.lowering.partitioner import capture_decline_reasons
from audiodeploy.lowering.report import describe_lowered_method
from audiodeploy.runtime import Program
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=4, max=64)


class ConvActivationConv(torch.nn.Module):
    """An activation between two convolutions, as in EnCodec's, Mimi's or DAC's residual units."""

    def __init__(self, activation: torch.nn.Module, channels: int = 8) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(channels, channels, 3, padding=1)
        self.activation = activation
        self.second = torch.nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        return self.second(self.activation(self.first(x)))


def lower_with_stock_xnnpack(module: torch.nn.Module, x: torch.Tensor):
    """``module`` lowered by ExecuTorch 1.5.1 alone (its own partitioner, no rewrite): the report and the program."""
    edge = to_edge_transform_and_lower(export_aten(module, (x,), ({2: FRAMES},)), partitioner=[XnnpackPartitioner()])
    report = describe_lowered_method("forward", edge.exported_program(), {}, (), ())
    return report, Program(edge.to_executorch().buffer)


def test_fp32_elu_over_dynamic_length_is_delegated_where_stock_leaves_it_outside():
    torch.manual_seed(0)
    module = ConvActivationConv(torch.nn.ELU(alpha=0.5)).eval()
    stock, _ = lower_with_stock_xnnpack(module, torch.randn(1, 8, 20))
    assert (stock.delegates, stock.ops_outside_delegates) == (2, {"aten.elu": 1}), stock
    report = lower_and_compare(
        module,
        (3 * torch.randn(1, 8, 20),),
        fold=False,  # the partitioner's own: no rewrite needed
        dynamic_shapes=({2: FRAMES},),
        also_run=[(3 * torch.randn(1, 8, 4),), (3 * torch.randn(1, 8, 64),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report


def test_fp32_selu_stays_outside_since_xnnpacks_elu_has_no_scale():
    torch.manual_seed(0)
    with capture_decline_reasons() as reasons:
        report = lower_and_compare(
            ConvActivationConv(torch.nn.SELU()).eval(), (3 * torch.randn(1, 8, 20),), dynamic_shapes=({2: FRAMES},)
        )
    assert report.ops_outside_delegates == {"aten.elu": 1}, report
    # Given twice: for the ATen node (kept whole for the partitioner or not) and for its edge node.
    (declined,) = {reason for node, node_reasons in reasons.items() if "elu" in node for reason in node_reasons}
    assert declined.startswith("XNNPACK's ELU has alpha only"), declined


def test_fp32_tanh_gelu_is_declined_where_stock_computes_the_erf_gelu():
    torch.manual_seed(0)
    module = ConvActivationConv(torch.nn.GELU(approximate="tanh")).eval()
    x = 3 * torch.randn(1, 8, 20)
    stock, program = lower_with_stock_xnnpack(module, x)
    assert (stock.delegates, stock.ops_outside_delegates) == (1, {}), stock
    with torch.no_grad():
        expected = module(x)
        erf_gelu = module.second(torch.nn.functional.gelu(module.first(x)))
    actual = program.run([x])[0]
    torch.testing.assert_close(actual, erf_gelu, atol=1e-5, rtol=1e-4)
    assert (actual - expected).abs().max() > 1e-4
    with capture_decline_reasons() as reasons:
        report = lower_and_compare(module, (x,), rewrite=False, dynamic_shapes=({2: FRAMES},))
    assert report.ops_outside_delegates == {"aten.gelu": 1}, report
    assert any("approximate='tanh'" in reason for node_reasons in reasons.values() for reason in node_reasons)
