"""fp16 programs: folded in fp32, stored and computed in fp16, float32 in and out, their fidelity reported."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import audiodeploy
from audiodeploy import LoweringOptions, Quantization, QuantizationScheme
from audiodeploy.program.fidelity import output_snr_db
from audiodeploy.runtime import Program

CHANNELS = 128
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


class Encoder(nn.Module):
    """A weight-normed convolution whose direction vector fp16 cannot square (its norm overflows fp16), a layer
    norm, the erf GELU, attention with a mask written as ``(keep - 1) * FLT_MAX`` (as transformers' masks are;
    ``keep`` is 0 or 1 from the values), and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(CHANNELS, CHANNELS, 5, padding=2))
        with torch.no_grad():  # |v|^2 far beyond 65504, the weight g * v / |v| as it was
            self.conv.parametrizations.weight.original1.mul_(300.0)
        self.norm = nn.LayerNorm(CHANNELS)
        self.query, self.key = nn.Linear(CHANNELS, CHANNELS), nn.Linear(CHANNELS, CHANNELS)
        self.head = nn.Linear(CHANNELS, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(self.norm(self.conv(x).transpose(1, 2)))
        scores = torch.bmm(self.query(h), self.key(h).transpose(1, 2)) / CHANNELS**0.5
        keep = (h[..., :1].transpose(1, 2) * 1e4).clamp(0, 1)  # the keys whose first feature is positive
        weights = (scores + (keep - 1.0) * FLOAT32_MAX).softmax(-1)
        return self.head(h + torch.bmm(weights, h))


@pytest.fixture(scope="module")
def programs():
    torch.manual_seed(0)
    module = Encoder().eval()
    x = torch.randn(1, CHANNELS, 40)
    shapes = ({2: Dim("frames", min=4, max=200)},)
    fp32 = audiodeploy.lower(module, (x,), dynamic_shapes=shapes)
    fp16 = audiodeploy.lower(module, (x,), dynamic_shapes=shapes, options=LoweringOptions(dtype=torch.float16))
    return module, fp32, fp16


def test_an_fp16_program_is_one_delegate_half_the_size_with_float32_in_and_out(programs):
    _, fp32, fp16 = programs
    method, fp32_method = fp16.report.methods["forward"], fp32.report.methods["forward"]
    assert method.delegates == fp32_method.delegates
    # Only the two casts more: float32 in, float32 out.
    outside = dict(method.ops_outside_delegates)
    assert outside.pop("dim_order_ops._to_dim_order_copy") == 2 + fp32_method.ops_outside_delegates.get(
        "dim_order_ops._to_dim_order_copy", 0
    )
    assert outside == {k: v for k, v in fp32_method.ops_outside_delegates.items() if "to_dim_order" not in k}
    assert len(method.folds) == 1
    # ExecuTorch 1.5.1 stores convolution weights in fp32 whatever their dtype (op_conv2d's force_fp32): the
    # linears' weights and biases take half their fp32 bytes, the convolution's all of theirs.
    module = programs[0]
    linear_bytes = sum(p.numel() * 4 for m in (module.query, module.key, module.head) for p in m.parameters())
    assert len(fp32.buffer) - len(fp16.buffer) >= 0.95 * linear_bytes / 2
    loaded = Program(fp16.buffer, trusted=True)
    assert [s.dtype for s in loaded.input_specs()] == [torch.float32]
    assert [s.dtype for s in loaded.output_specs()] == [torch.float32]


def test_computed_weights_are_folded_in_fp32_and_masks_stay_finite(programs):
    module, _, fp16 = programs
    x = torch.randn(1, CHANNELS, 77)
    with torch.no_grad():
        expected = module(x)
    (actual,) = Program(fp16.buffer, trusted=True).run((x,))
    assert torch.isfinite(actual).all()
    # Folded in fp16, the convolution's weight would be 0 (its norm inf) and the output unrelated to eager's.
    assert output_snr_db(expected, actual) > 45


def test_the_report_gives_the_fidelity_against_fp32_eager(programs):
    _, _, fp16 = programs
    precision = fp16.report.precision
    assert precision is not None and precision.dtype == "float16"
    assert precision.fidelity["forward"]["snr_db"] > 45
    assert "precision: float16" in fp16.report.describe()
    assert type(fp16.report).from_dict(fp16.report.to_dict()) == fp16.report


def test_fp16_goes_with_fp32_and_not_with_int8():
    with pytest.raises(ValueError, match="choose one"):
        LoweringOptions(dtype=torch.float16, quantization=Quantization(QuantizationScheme.INT8_DYNAMIC))
    with pytest.raises(ValueError, match="torch.float32 or torch.float16"):
        LoweringOptions(dtype=torch.bfloat16)


class MultiheadAttentionSilu(nn.Module):
    """`nn.MultiheadAttention` with a float mask (it computes the scores with ``baddbmm``) and a SiLU: torch's
    decompositions of both compute fp16 in fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.bias = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.tanh(torch.bmm(self.bias(x), x.transpose(1, 2))).squeeze(0)  # [frames, frames]
        attended, _ = self.attention(x, x, x, attn_mask=mask)  # with its weights: baddbmm, not sdpa
        return nn.functional.silu(attended)


def test_ops_whose_decompositions_upcast_fp16_leave_no_cast_between_delegates():
    torch.manual_seed(0)
    module = MultiheadAttentionSilu().eval()
    example, shapes = (torch.randn(1, 12, 32),), ({1: Dim("frames", min=2, max=64)},)
    fp32 = audiodeploy.lower(module, example, dynamic_shapes=shapes).report.methods["forward"]
    lowered = audiodeploy.lower(module, example, dynamic_shapes=shapes, options=LoweringOptions(dtype=torch.float16))
    method = lowered.report.methods["forward"]
    # As the fp32 program, with the casts of the input and of the output only: no fp32 island in between.
    assert method.delegates == fp32.delegates, (method, fp32)
    outside = dict(method.ops_outside_delegates)
    assert outside.pop("dim_order_ops._to_dim_order_copy") == 2, method
    assert outside == fp32.ops_outside_delegates
    x = torch.randn(1, 40, 32)
    (got,) = Program(lowered.buffer, trusted=True).run((x,))
    assert output_snr_db(module(x), got) > 40


class BiasedAttention(nn.Module):
    """Attention scores plus a learned bias per head, expanded to the length: a value of the length alone, which the
    program stores at the longest length and cuts to ``[:, :t, :t]``."""

    def __init__(self) -> None:
        super().__init__()
        self.project = nn.Linear(32, 32)
        self.bias = nn.Parameter(torch.randn(4, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[1]
        heads = self.project(x).view(frames, 4, 8).transpose(0, 1)
        scores = torch.bmm(heads, heads.transpose(1, 2)) + self.bias.expand(4, frames, frames)
        return torch.bmm(scores.softmax(-1), heads)


def test_an_fp16_program_of_a_constant_cut_to_the_length_takes_the_longest_length():
    # Traced again in fp16, a view of the stored [4, 60, 60] would be contiguous only at 60 frames, which torch
    # would guard against: the export failed with "Constraints violated (frames)".
    torch.manual_seed(0)
    module = BiasedAttention().eval()
    lowered = audiodeploy.lower(
        module,
        (torch.randn(1, 12, 32),),
        dynamic_shapes=({1: Dim("frames", min=2, max=60)},),
        options=LoweringOptions(dtype=torch.float16),
    )
    program = Program(lowered.buffer, trusted=True)
    for frames in (2, 60):
        x = torch.randn(1, frames, 32)
        (got,) = program.run((x,))
        assert output_snr_db(module(x), got) > 40, frames
