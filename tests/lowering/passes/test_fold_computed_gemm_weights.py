"""Folding computed GEMM weights: what must fold, what must not, and what must still run.

A test of what lands in the delegates, or in the .pte, lowers for real, runs the .pte with ExecuTorch's runtime
and compares with eager PyTorch. A test of the fold's own decisions (what it rejects, how it names a constant)
checks the rewritten and folded program that lowering starts from, run by PyTorch against eager.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted
from torch.export import Dim
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

import audiodeploy
from audiodeploy.lowering.passes.fold_computed_gemm_weights import plan_folds
from tests.pipeline import assert_matches_eager, assert_program_matches_eager, lower_and_compare, rewritten

GEMM_OPS = {"aten.convolution", "aten.linear", "aten.addmm", "aten.mm", "aten.bmm"}
WEIGHT_COMPUTATION_OPS = {"aten.pow", "aten.sum", "aten.div", "aten.mul", "aten.sqrt", "aten.linalg_vector_norm"}


def seeded(module: torch.nn.Module) -> torch.nn.Module:
    return module.eval()


def assert_one_delegate_nothing_outside(report) -> None:
    assert report.delegates == 1, report
    assert report.ops_outside_delegates == {}, report
    assert report.gemms_not_delegated == ()


class ComputedLinear(torch.nn.Module):
    """A linear whose weight and bias are both computed from parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.weight_direction = torch.nn.Parameter(torch.randn(12, 16))
        self.weight_scale = torch.nn.Parameter(torch.rand(12, 1) + 0.5)
        self.bias_offset = torch.nn.Parameter(torch.randn(12))

    def forward(self, x):
        return F.linear(x, self.weight_direction * self.weight_scale, self.bias_offset + 1.0)


torch.manual_seed(0)
MUST_FOLD = {
    "fp32_weight_norm_conv1d": (
        lambda: weight_norm(torch.nn.Conv1d(16, 16, 8, padding=4, groups=4), dim=2),
        (1, 16, 40),
        1,
    ),
    "fp32_computed_weight_and_bias_linear": (ComputedLinear, (3, 16), 1),
    "fp32_weight_norm_linear": (lambda: weight_norm(torch.nn.Linear(16, 24)), (5, 16), 1),
    "fp32_weight_norm_conv2d": (lambda: weight_norm(torch.nn.Conv2d(4, 8, 3, padding=1)), (1, 4, 10, 10), 1),
    "fp32_weight_norm_depthwise_conv1d": (
        lambda: weight_norm(torch.nn.Conv1d(8, 8, 5, padding=2, groups=8)),
        (1, 8, 30),
        1,
    ),
    "fp32_weight_norm_conv_transpose1d": (
        lambda: weight_norm(torch.nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)),
        (1, 8, 20),
        1,
    ),
    "fp32_spectral_norm_linear": (lambda: spectral_norm(torch.nn.Linear(16, 12)), (4, 16), 1),
    "fp32_spectral_norm_conv1d": (lambda: spectral_norm(torch.nn.Conv1d(8, 8, 3, padding=1)), (1, 8, 25), 1),
}


@pytest.mark.parametrize("case", MUST_FOLD, ids=list(MUST_FOLD))
def test_must_fold(case):
    torch.manual_seed(0)
    build, input_shape, folds = MUST_FOLD[case]
    module = build().eval()
    if case.startswith("fp32_spectral"):
        module.train()
        with torch.no_grad():  # a few power iterations, as a trained checkpoint has
            for _ in range(3):
                module(torch.randn(*input_shape))
        module.eval()
    report = lower_and_compare(module, (torch.randn(*input_shape),))
    assert_one_delegate_nothing_outside(report)
    assert len(report.folds) == folds
    assert report.not_folded == ()


def test_fp32_weight_norm_conv1d_dynamic_length_runs_two_lengths():
    torch.manual_seed(0)
    module = weight_norm(torch.nn.Conv1d(16, 16, 8, padding=4, groups=4), dim=2).eval()
    length = Dim("length", min=16, max=200)
    report = lower_and_compare(
        module,
        (torch.randn(1, 16, 40),),
        dynamic_shapes=({2: length},),
        also_run=[(torch.randn(1, 16, 123),)],
    )
    assert_one_delegate_nothing_outside(report)
    assert len(report.folds) == 1


class TwoMethods(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(32, 32, 16, padding=8, groups=2), dim=2)

    def forward(self, x):
        return self.conv(x)

    def doubled(self, x):
        return self.conv(x) * 2.0


class DoubledMethod(torch.nn.Module):
    def __init__(self, owner: TwoMethods) -> None:
        super().__init__()
        self.owner = owner

    def forward(self, x):
        return self.owner.doubled(x)


def test_fp32_two_methods_sharing_weight_norm_conv_store_folded_weight_once():
    torch.manual_seed(0)
    module = TwoMethods().eval()
    x = torch.randn(1, 32, 50)
    one = audiodeploy.lower(module, (x,))
    two = audiodeploy.lower(
        {
            "forward": audiodeploy.Method(module, (x,)),
            "doubled": audiodeploy.Method(DoubledMethod(module), (x,)),
        }
    )
    assert_matches_eager(two, module, (x,), "forward")
    assert_matches_eager(two, module, (x,), "doubled")
    for method in two.report.methods.values():
        assert len(method.folds) == 1
        assert method.delegates == 1
    folded_weight_bytes = two.report.methods["doubled"].folds[0].bytes_written
    # A second copy of the folded weight would add its full size.
    assert two.report.pte_bytes - one.report.pte_bytes < folded_weight_bytes / 2


def test_fp32_weight_norm_conv1d_pte_is_smaller_with_fold():
    torch.manual_seed(0)
    module = weight_norm(torch.nn.Conv1d(32, 32, 16, padding=8, groups=2), dim=2).eval()
    x = torch.randn(1, 32, 50)
    folded = audiodeploy.lower(module, (x,))
    stock = audiodeploy.lower(module, (x,), options=audiodeploy.LoweringOptions(fold=False))
    assert folded.report.pte_bytes < stock.report.pte_bytes
    assert stock.report.methods["forward"].gemms_not_delegated  # the reason the fold exists


# --- must not fold, and still match eager -------------------------------------------------


class SourceUsedElsewhere(torch.nn.Module):
    """``scale`` also scales the input itself. A use computed from parameters alone would not count: that
    value becomes a constant first (ParameterOnlyValuesAsConstantsPass), and the fold is then valid."""

    def __init__(self) -> None:
        super().__init__()
        self.direction = torch.nn.Parameter(torch.randn(8, 8))
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        return F.linear(x * self.scale, self.direction * self.scale)


class MutatedBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8))
        self.register_buffer("gain", torch.ones(8, 1))

    def forward(self, x):
        self.gain.mul_(1.5)
        return F.linear(x, self.weight * self.gain)


class LowRankProduct(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = torch.nn.Parameter(torch.randn(32, 2))
        self.right = torch.nn.Parameter(torch.randn(2, 32))

    def forward(self, x):
        return F.linear(x, self.left @ self.right)


class SourceStaysGemmInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.direction = torch.nn.Parameter(torch.randn(8, 8))
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        return F.linear(x, self.direction * self.scale[:, None], self.scale)


class IntermediateFeedsGemm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.direction = torch.nn.Parameter(torch.randn(8, 8))
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        doubled = self.scale * 2.0
        return F.linear(x, self.direction * doubled[:, None], doubled)


class PackedBiasThreeLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Parameter(torch.randn(8, 8))
        self.k = torch.nn.Parameter(torch.randn(8, 8))
        self.v = torch.nn.Parameter(torch.randn(8, 8))
        self.packed_bias = torch.nn.Parameter(torch.randn(24))

    def forward(self, x):
        q_bias, k_bias, v_bias = (self.packed_bias * 0.5).split(8)
        return F.linear(x, self.q, q_bias) + F.linear(x, self.k, k_bias) * F.linear(x, self.v, v_bias)


MUST_NOT_FOLD = {
    "source_also_used_elsewhere": (SourceUsedElsewhere, "also used by"),
    "low_rank_product_would_grow": (LowRankProduct, "would grow the program"),
    "source_stays_another_gemm_input": (SourceStaysGemmInput, "also another input of the GEMM"),
    "intermediate_also_feeds_gemm": (IntermediateFeedsGemm, "feeds the GEMM"),
    "computation_shared_by_three_linears": (PackedBiasThreeLinears, "also used by"),
}


@pytest.mark.parametrize("case", MUST_NOT_FOLD, ids=list(MUST_NOT_FOLD))
def test_fp32_must_not_fold(case):
    torch.manual_seed(0)
    build, reason = MUST_NOT_FOLD[case]
    module = build().eval()
    inputs = (torch.randn(4, module_in_features(module)),)
    result = rewritten(module, inputs)
    assert result.folds == ()
    assert result.not_folded, result
    assert all(reason in n.reason for n in result.not_folded), result.not_folded
    assert_program_matches_eager(result.program, module, [inputs])


def test_fp32_must_not_fold_a_weight_scaled_by_a_mutated_buffer():
    # Lowered: the .pte updates the buffer at run time (its initial value kept), and must still match eager.
    torch.manual_seed(0)
    module = MutatedBuffer().eval()
    inputs = (torch.randn(4, 8),)
    # the eager module mutates its buffer: compare against a fresh copy
    fresh = MutatedBuffer().eval()
    fresh.load_state_dict(module.state_dict())
    lowered = audiodeploy.lower(module, inputs)
    assert_matches_eager(lowered, fresh, inputs)
    report = lowered.report.methods["forward"]
    assert report.folds == ()
    assert report.not_folded, report
    assert all("mutates" in n.reason for n in report.not_folded), report.not_folded


def module_in_features(module: torch.nn.Module) -> int:
    return 32 if isinstance(module, LowRankProduct) else 8


def test_fp32_sources_tagged_for_external_data_are_not_folded():
    torch.manual_seed(0)
    module = weight_norm(torch.nn.Conv1d(8, 8, 4, padding=2), dim=2).eval()
    x = torch.randn(1, 8, 30)
    unlifted = torch.export.export(module, (x,)).module()
    delegate_external_constants_pass_unlifted(unlifted, gen_tag_fn=lambda node: "weights")
    lowered = audiodeploy.lower(unlifted, (x,))
    assert_matches_eager(lowered, module, (x,))
    report = lowered.report.methods["forward"]
    assert report.folds == ()
    assert any("tagged for external data `weights`" in n.reason for n in report.not_folded)


# --- still exports and matches eager -------------------------------------------------------


def test_fp64_conv_declined_by_xnnpack_keeps_its_weight_computation():
    torch.manual_seed(0)
    module = weight_norm(torch.nn.Conv1d(4, 4, 3), dim=2).double().eval()
    x = torch.randn(1, 4, 20, dtype=torch.float64)
    folded = lower_and_compare(module, (x,))
    stock = lower_and_compare(module, (x,), fold=False)
    assert folded.folds == ()
    assert "XNNPACK declines this GEMM even with a static weight" in folded.not_folded[0].reason
    assert folded.ops_outside_delegates == stock.ops_outside_delegates
    assert folded.delegates == stock.delegates
    assert folded.gemms_not_delegated


class MatmulComputedWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = torch.nn.Parameter(torch.randn(8, 8))
        self.right = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return F.linear(x, torch.mm(self.left, self.right))


def test_fp32_weight_computed_by_a_delegated_matmul():
    torch.manual_seed(0)
    report = lower_and_compare(MatmulComputedWeight().eval(), (torch.randn(3, 8),), atol=1e-4)
    assert report.gemms_not_delegated == ()


# --- safety details ------------------------------------------------------------------------


class FoldedNameTaken(torch.nn.Module):
    """A fold at the top level would be named ``linear.weight``, which a parameter already has."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(8, 8))
        self.linear = torch.nn.Module()
        self.linear.weight = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return F.linear(x, self.a * 2.0) + self.linear.weight


def test_fp32_existing_parameter_with_the_folded_name_is_kept():
    torch.manual_seed(0)
    module = FoldedNameTaken().eval()
    x = torch.randn(3, 8)
    result = rewritten(module, (x,))
    (fold,) = result.folds
    constants = tuple(target for _, target in fold.constants)
    assert constants != ("linear.weight",)
    assert constants[0].startswith("linear.weight")
    assert_program_matches_eager(result.program, module, [(x,)])  # linear.weight is still the module's own


class ViewWeights(torch.nn.Module):
    """Weights that are views: a transpose, and a slice of a larger parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.transposed = torch.nn.Parameter(torch.randn(8, 12))
        self.stacked = torch.nn.Parameter(torch.randn(20, 12))

    def forward(self, x):
        return F.linear(F.linear(x, self.transposed.t()), self.stacked[4:12])


def test_fp32_folded_views_are_written_with_their_own_bytes():
    torch.manual_seed(0)
    report = lower_and_compare(ViewWeights().eval(), (torch.randn(3, 8),))
    assert len(report.folds) == 2
    assert_one_delegate_nothing_outside(report)


class WriterAndReader(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8))
        self.register_buffer("gain", torch.full((8, 1), 0.5))

    def forward(self, x):
        return F.linear(x, self.weight * self.gain)

    def update(self, x):
        self.gain.add_(x.mean())
        return x * 2.0


class UpdateMethod(torch.nn.Module):
    def __init__(self, owner: WriterAndReader) -> None:
        super().__init__()
        self.owner = owner

    def forward(self, x):
        return self.owner.update(x)


def test_fp32_buffer_written_only_by_another_method_is_folded_as_constant():
    torch.manual_seed(0)
    module = WriterAndReader().eval()
    x = torch.randn(3, 8)
    reference = WriterAndReader().eval()
    reference.load_state_dict(module.state_dict())
    lowered = audiodeploy.lower(
        {"forward": audiodeploy.Method(module, (x,)), "update": audiodeploy.Method(UpdateMethod(module), (x,))}
    )
    assert len(lowered.report.methods["forward"].folds) == 1
    assert lowered.report.methods["update"].folds == ()
    assert_matches_eager(lowered, reference, (x,))


def test_plan_folds_finds_nothing_when_weights_are_parameters():
    module = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3), torch.nn.ReLU()).eval()
    ep = torch.export.export(module, (torch.randn(1, 4, 10),))
    plan = plan_folds(ep)
    assert plan.candidates == () and plan.rejections == ()
