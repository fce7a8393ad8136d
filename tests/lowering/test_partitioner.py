"""The partitioner's corrections: what stock 1.5.1 would delegate and then compute wrongly or fail to load."""

import torch

from audiodeploy.lowering.partitioner import ExplainingXnnpackPartitioner, capture_decline_reasons
from tests.pipeline import export_aten, lower_and_compare


class ScaledAddmm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 6))
        self.bias = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight, alpha=2.0, beta=3.0)


def test_fp32_scaled_addmm_stays_on_portable():
    torch.manual_seed(0)
    report = lower_and_compare(ScaledAddmm().eval(), (torch.randn(4, 8),))
    assert report.delegates == 0
    assert report.ops_outside_delegates == {"aten.addmm": 1}
    assert "alpha" in report.gemms_not_delegated[0].reason


class SevenDimensionalPermute(torch.nn.Module):
    """UnivNet's location-variable convolution reshapes through 7-D tensors."""

    def forward(self, x):
        y = (x * 2.0).reshape(1, 2, 3, 2, 2, 2, 2)
        return y.permute(6, 5, 4, 3, 2, 1, 0).reshape(2, -1) + 1.0


def test_fp32_ops_on_tensors_of_more_than_six_dimensions_are_not_delegated():
    report = lower_and_compare(SevenDimensionalPermute().eval(), (torch.randn(2, 48),))
    assert report.ops_outside_delegates.get("aten.permute_copy") == 1


def test_decline_reasons_are_collected_without_reaching_the_root_logger(caplog):
    with caplog.at_level("DEBUG"):
        report = lower_and_compare(ScaledAddmm().eval(), (torch.randn(4, 8),))
    assert report.gemms_not_delegated
    assert not [r for r in caplog.records if "WhyNoPartition" in r.getMessage()]


def test_capture_restores_the_loggers():
    import logging

    logger = logging.getLogger("executorch.backends.xnnpack.partition")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with capture_decline_reasons():
        pass
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


class PairwiseDifferences(torch.nn.Module):
    """A T x T value from a length-T input, unsqueezed for a broadcast, as an einsum over relative positions is
    (Wav2Vec2-BERT's relative-key attention): its output has two dynamic sizes."""

    def forward(self, x):
        differences = x[:, :, None] - x[:, None, :]
        return torch.relu(differences).unsqueeze(-1) * 2.0


def test_fp32_reshape_with_two_dynamic_sizes_stays_outside_with_its_reason():
    # Stock 1.5.1 delegates the unsqueeze and fails when building the delegate: "reshape only supports 1 dynamic
    # dimension". Declined, it runs on the portable kernel between two delegates.
    torch.manual_seed(0)
    length = torch.export.Dim("length", min=2, max=64)
    with capture_decline_reasons() as reasons:
        report = lower_and_compare(
            PairwiseDifferences().eval(),
            (torch.randn(1, 5),),
            dynamic_shapes=({1: length},),
            also_run=[(torch.randn(1, 37),)],
        )
    assert report.ops_outside_delegates == {"aten.unsqueeze_copy": 1}, report
    assert report.delegates == 2, report
    declined = [reason for node, node_reasons in reasons.items() if "unsqueeze" in node for reason in node_reasons]
    assert len(declined) == 1 and "reshape infers at most one dynamic size" in declined[0], reasons
    assert declined[0].endswith("has 2"), declined


class LinearOfAParameterAndOfAnInput(torch.nn.Module):
    """One linear XNNPACK takes (a parameter's weight) and, with `weight_from_input`, one it declines (a weight that
    is an input)."""

    def __init__(self, weight_from_input: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.weight_from_input = weight_from_input

    def forward(self, x, w):
        y = self.linear(x)
        return torch.nn.functional.linear(y, w) if self.weight_from_input else y + w.sum()


def _kept_whole(module: torch.nn.Module):
    inputs = (torch.randn(4, 8), torch.randn(8, 8))
    program = export_aten(module.eval(), inputs)
    return ExplainingXnnpackPartitioner().ops_to_not_decompose(program), inputs


def test_ops_kept_whole_need_no_filter_when_every_node_of_them_passes_it():
    (ops, keeps), _ = _kept_whole(LinearOfAParameterAndOfAnInput(weight_from_input=False))
    assert torch.ops.aten.linear.default in ops
    assert keeps is None  # edge lowering takes its one-decomposition path


def test_a_node_the_filter_declines_brings_the_filter_back_and_lowering_matches_eager():
    torch.manual_seed(0)
    module = LinearOfAParameterAndOfAnInput(weight_from_input=True)
    (ops, keeps), inputs = _kept_whole(module)
    assert torch.ops.aten.linear.default in ops and keeps is not None
    report = lower_and_compare(module.eval(), inputs)
    assert not any("linear" in op for op in report.ops_outside_delegates), report.ops_outside_delegates


def test_an_op_whose_decomposition_may_make_an_op_kept_whole_brings_the_filter_back():
    """SELU decomposes into an ``aten.elu`` with a scale, which XNNPACK declines: its node is filtered after the
    decomposition (tests/lowering/test_partitioner_activations.py lowers it)."""
    program = export_aten(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SELU()).eval(), (torch.randn(4, 8),))
    _, keeps = ExplainingXnnpackPartitioner().ops_to_not_decompose(program)
    assert keeps is not None
