"""Strided 1-D convolutions: the first layer on samples as a tap gathering and a GEMM, the wider ones left to
XNNPACK's indirect GEMM; one delegate, one image from the first layer to the last, the same numbers as eager.

The feature encoder's .pte runs with ExecuTorch's runtime, the weight-normed one's
rewritten program with PyTorch; each is compared with eager PyTorch at both ends of
the exported range, at odd and even lengths (a stride-2 layer drops a sample at one
and not the other).
"""

from __future__ import annotations

import torch
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

from audiodeploy.lowering.passes._graph import constant_sources
from audiodeploy.lowering.passes.strided_conv_as_gemm import StridedConvAsGemmPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare, rewritten

aten = torch.ops.aten

SAMPLES = Dim("samples", min=400, max=4000)


class FeatureEncoder(torch.nn.Module):
    """wav2vec2's feature encoder in small: kernel 10 stride 5 on samples, then kernel 3 and 2 at stride 2."""

    def __init__(self, bias: bool = False, padding: int = 0, group_norm: bool = False) -> None:
        super().__init__()
        # wav2vec2's "group" feature norm: one group per channel, after the first layer only
        self.norm = torch.nn.GroupNorm(16, 16) if group_norm else torch.nn.Identity()
        self.layers = torch.nn.ModuleList(
            [
                torch.nn.Conv1d(1, 16, 10, stride=5, bias=bias),
                torch.nn.Conv1d(16, 16, 3, stride=2, bias=bias, padding=padding),
                torch.nn.Conv1d(16, 16, 3, stride=2, bias=bias),
                torch.nn.Conv1d(16, 24, 2, stride=2, bias=bias),
            ]
        )

    def forward(self, waveform):
        x = waveform.unsqueeze(1)
        for index, layer in enumerate(self.layers):
            x = layer(x)
            x = torch.nn.functional.gelu(self.norm(x) if index == 0 else x)
        return x.transpose(1, 2)


def lengths() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, n),) for n in (400, 401, 1234, 3999, 4000)]


def strided_gemms(ep) -> int:
    """Strided convolutions that multiply by weights, rather than select one tap per output channel."""
    sources = constant_sources(ep)
    count = 0
    for node in ep.graph.nodes:
        if (
            node.target not in (aten.conv1d.default, aten.conv2d.default)
            or len(node.args) < 4
            or max(node.args[3]) == 1
        ):
            continue
        weight = sources.get(node.args[1])
        selects = (
            weight is not None
            and bool(((weight == 0) | (weight == 1)).all())
            and bool((weight.flatten(1).sum(1) == 1).all())
        )
        count += not selects
    return count


def test_fp32_feature_encoder_is_one_image_in_one_delegate():
    torch.manual_seed(0)
    module = FeatureEncoder(bias=True, padding=1, group_norm=True).eval()
    first, *others = lengths()
    report = lower_and_compare(module, first, dynamic_shapes=({1: SAMPLES},), also_run=others)
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert {"StridedConvAsGemmPass", "ConvChainsAsImagesPass", "SqueezeUnsqueezePairsPass"} <= set(report.rewrites)
    # From the samples' column to the last convolution one image [N, C, T, 1]: the gathering, the group norm and
    # the convolutions after it in one orientation, so that XNNPACK changes no layout between them.
    nodes = list(rewritten(module, first, ({1: SAMPLES},)).program.graph.nodes)
    convolutions = [index for index, node in enumerate(nodes) if node.target == aten.conv2d.default]
    between = nodes[convolutions[0] : convolutions[-1]]
    assert len(convolutions) == 5 and not [node.name for node in between if node.target in _RESHAPES]


_RESHAPES = frozenset(
    {aten.view.default, aten.reshape.default, aten.unsqueeze.default, aten.squeeze.dim, aten.permute.default}
)


def test_fp32_only_the_one_channel_convolution_is_gathered():
    ep = export_aten(FeatureEncoder().eval(), lengths()[0], dynamic_shapes=({1: SAMPLES},))
    assert strided_gemms(ep) == 4
    gathering = StridedConvAsGemmPass(ep)
    assert gathering(ep.graph_module).modified
    assert strided_gemms(ep) == 3
    assert (
        sorted(reason for _, reason in gathering.skipped)
        == ["16 input channels: XNNPACK's indirect GEMM convolves them at its GEMM's rate"] * 3
    )


def test_fp32_weight_norm_strided_conv_is_folded():
    torch.manual_seed(0)
    module = FeatureEncoder().eval()
    module.layers[0] = weight_norm(module.layers[0], dim=2)
    module.layers[1] = weight_norm(module.layers[1], dim=2)
    counts = {"aten._weight_norm.default": 0}
    result = assert_rewrites(module, lengths(), "StridedConvAsGemmPass", counts, dynamic_shapes=({1: SAMPLES},))
    assert sorted(fold.candidate.gemm_label for fold in result.folds) == ["conv2d @ layers.0", "conv2d @ layers.1"]
    assert strided_gemms(result.program) == 3


class Untouched(torch.nn.Module):
    """Convolutions the pass leaves: stride 1, grouped, dilated, and one whose weight another op reads."""

    def __init__(self) -> None:
        super().__init__()
        self.stride_one = torch.nn.Conv1d(8, 8, 3)
        self.grouped = torch.nn.Conv1d(8, 8, 3, stride=2, groups=2)
        self.dilated = torch.nn.Conv1d(8, 8, 3, stride=2, dilation=2)
        self.shared = torch.nn.Conv1d(8, 8, 3, stride=2)

    def forward(self, x):
        y = self.dilated(self.grouped(self.stride_one(x)))
        return self.shared(y).sum() + self.shared.weight.sum()


def test_does_nothing_on_stride_one_grouped_dilated_or_shared_weight_convolutions():
    ep = export_aten(Untouched().eval(), (torch.randn(1, 8, 64),))
    assert not StridedConvAsGemmPass(ep)(ep.graph_module).modified
