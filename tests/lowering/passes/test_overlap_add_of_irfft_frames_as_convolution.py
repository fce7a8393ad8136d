"""irfft frames overlap-added by F.fold (Vocos' "same"-padding ISTFT) as constant-kernel convolutions: one delegate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.overlap_add_of_irfft_frames_as_convolution import (
    OverlapAddOfIrfftFramesAsConvolutionPass,
)
from tests.pipeline import assert_program_matches_eager, export_aten, lower_what_stock_cannot_build

FRAMES = Dim("frames", min=2, max=64)
DYNAMIC = ({1: FRAMES}, {1: FRAMES})
# As for torch.istft's rewrite: another summation order, kernels rounded from float64.
REWRITE_ATOL = 1e-6
REWRITE_RTOL = 1e-5


class SamePaddingIstft(torch.nn.Module):
    """Vocos' ISTFT with padding="same" (transformers' WavTokenizer head): irfft of each frame of a spectrum whose
    frequencies are the last axis, windowed, overlap-added with F.fold, trimmed by (n_fft - hop) / 2 at each end and
    divided by the window's overlap-added square, clamped below."""

    def __init__(self, n_fft: int = 256, hop: int = 64, spectrum: str = "polar", trim: int | None = None,
                 norm: str = "backward", envelope_scale: float = 1.0) -> None:  # fmt: skip
        super().__init__()
        self.n_fft, self.hop, self.spectrum, self.norm = n_fft, hop, spectrum, norm
        self.trim = (n_fft - hop) // 2 if trim is None else trim
        self.envelope_scale = envelope_scale
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        if self.spectrum == "polar":
            spectrum = torch.polar(torch.exp(first).clamp(max=1e2), second)
        else:
            spectrum = torch.complex(first, second)
        frames = torch.fft.irfft(spectrum, self.n_fft, dim=-1, norm=self.norm).transpose(1, 2)
        frames = frames * self.window[None, :, None]
        count = spectrum.shape[1]
        size = (count - 1) * self.hop + self.n_fft
        fold = dict(output_size=(1, size), kernel_size=(1, self.n_fft), stride=(1, self.hop))
        audio = F.fold(frames, **fold)[:, 0, 0, self.trim : -self.trim]
        square = self.window.square().expand(1, count, -1).transpose(1, 2)
        envelope = F.fold(square, **fold).squeeze()[self.trim : -self.trim] * self.envelope_scale
        return audio / envelope.clamp(min=1e-11)


def spectrum(bins: int, frames: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, frames, bins, generator=generator), torch.randn(1, frames, bins, generator=generator)


def test_fp32_same_padding_istft_over_dynamic_frames_is_one_delegate():
    module = SamePaddingIstft().eval()
    report = lower_what_stock_cannot_build(
        module,
        spectrum(module.bins, 20),
        "aten.polar",
        dynamic_shapes=DYNAMIC,
        also_run=[spectrum(module.bins, 2, seed=1), spectrum(module.bins, 64, seed=2)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert report.rewrites[0] == "OverlapAddOfIrfftFramesAsConvolutionPass"


def rewritten(module: SamePaddingIstft, example: tuple[torch.Tensor, torch.Tensor]):
    """The ATen program of `module` after the pass, which must have replaced the irfft, the folds and the division."""
    program = export_aten(module, example, DYNAMIC)
    rewrite = OverlapAddOfIrfftFramesAsConvolutionPass(program)
    assert rewrite(program.graph_module).modified, rewrite.skipped
    targets = {node.target for node in program.graph.nodes}
    aten = torch.ops.aten
    assert not targets & {aten.col2im.default, aten.fft_irfft.default, aten.polar.default, aten.complex.default}
    return program


@pytest.mark.parametrize(
    "options",
    [
        {"spectrum": "complex"},
        {"n_fft": 60, "hop": 24},  # the trim of 18 is not a whole number of hops
        {"n_fft": 64, "hop": 16, "norm": "ortho"},
        {"n_fft": 64, "hop": 32, "trim": 16},  # half a frame of overlap
    ],
    ids=["complex", "trim-between-hops", "ortho", "two-taps"],
)
def test_fp32_rewritten_program_equals_the_model_at_any_frame_count(options):
    module = SamePaddingIstft(**options).eval()
    program = rewritten(module, spectrum(module.bins, 20))
    assert not any("window" in name for name in program.constants)  # in the kernels now
    cases = [spectrum(module.bins, frames, seed=frames) for frames in (2, 3, 9, 64)]
    assert_program_matches_eager(program, module, cases, atol=REWRITE_ATOL, rtol=REWRITE_RTOL)


def test_does_nothing_on_unequal_trims_or_another_divisor():
    class UnequalTrim(SamePaddingIstft):
        def forward(self, first, second):
            frames = torch.fft.irfft(torch.complex(first, second), self.n_fft, dim=-1).transpose(1, 2)
            size = (first.shape[1] - 1) * self.hop + self.n_fft
            fold = dict(output_size=(1, size), kernel_size=(1, self.n_fft), stride=(1, self.hop))
            return F.fold(frames, **fold)[:, 0, 0, 16:-8] / 2.0

    cases = {
        UnequalTrim(64, 16): "not trimmed equally",
        # Divided by twice the envelope: not what the overlap-added window gives.
        SamePaddingIstft(64, 16, envelope_scale=2.0): "not the window's overlap-added square",
    }
    for module, reason in cases.items():
        program = export_aten(module.eval(), spectrum(module.bins, 20), DYNAMIC)
        rewrite = OverlapAddOfIrfftFramesAsConvolutionPass(program)
        assert not rewrite(program.graph_module).modified
        reasons = [why for _, why in rewrite.skipped]
        assert any(reason in why for why in reasons), reasons
