"""torch.istft of a torch.complex spectrum as constant-kernel convolutions: an inverse STFT in one delegate."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from audiodeploy.lowering.passes.inverse_stft_as_convolution import InverseStftAsConvolutionPass
from tests.pipeline import assert_program_matches_eager, export_aten, lower_what_stock_cannot_build

FRAMES = Dim("frames", min=2, max=64)
DYNAMIC = ({2: FRAMES}, {2: FRAMES})
# The rewritten graph before lowering computes what torch.istft computes, in another summation order and with
# kernels rounded from float64 (measured: 2e-7 on unit-variance spectra, whose samples have std 0.03; 1.4e-6
# relative where normalized=True scales them by sqrt(n_fft)).
REWRITE_ATOL = 1e-6
REWRITE_RTOL = 1e-5


class InverseStft(torch.nn.Module):
    """`torch.istft(torch.complex(real, imag))` with a window buffer, as Vocos' ISTFTHead calls it."""

    def __init__(self, n_fft: int = 1024, hop: int = 256, win_length: int | None = None, center: bool = True,
                 window: str = "hann", **options: object) -> None:  # fmt: skip
        super().__init__()
        self.n_fft, self.hop, self.win_length = n_fft, hop, win_length or n_fft
        self.center, self.options = center, options
        if window == "hann":
            self.register_buffer("window", torch.hann_window(self.win_length))
        elif window == "random":  # positive everywhere, so that center=False passes torch.istft's envelope check
            generator = torch.Generator().manual_seed(0)
            self.register_buffer("window", 0.5 + torch.rand(self.win_length, generator=generator))
        else:  # torch.istft's default: rectangular
            self.window = None

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    def forward(self, real: torch.Tensor, imaginary: torch.Tensor) -> torch.Tensor:
        spectrum = torch.complex(real, imaginary)
        return torch.istft(
            spectrum, self.n_fft, self.hop, self.win_length, self.window, center=self.center, **self.options
        )


def spectrum(bins: int, frames: int, seed: int = 0, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, bins, frames)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def test_fp32_inverse_stft_over_dynamic_frames_is_one_delegate():
    # Vocos' geometry (a hop of a quarter frame: 4 taps, centre trim of 2 blocks) at a quarter of its n_fft, to
    # keep the test quick; tests/recipes/test_vocos.py lowers the full-size one.
    module = InverseStft(256, 64).eval()
    report = lower_what_stock_cannot_build(
        module,
        spectrum(module.bins, 20),
        "aten.complex",
        dynamic_shapes=DYNAMIC,
        also_run=[spectrum(module.bins, 2, seed=1), spectrum(module.bins, 64, seed=2)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    # The rest keep the envelope's chained convolutions on one image.
    assert report.rewrites[0] == "InverseStftAsConvolutionPass" and "ConvChainsAsImagesPass" in report.rewrites


def rewritten(module: InverseStft, example: tuple[torch.Tensor, torch.Tensor], dynamic_shapes=DYNAMIC):
    """The ATen program of `module` after the pass, which must have replaced the inverse STFT."""
    program = export_aten(module, example, dynamic_shapes)
    rewrite = InverseStftAsConvolutionPass(program)
    assert rewrite(program.graph_module).modified, rewrite.skipped
    targets = {node.target for node in program.graph.nodes}
    assert torch.ops.aten.istft.default not in targets and torch.ops.aten.complex.default not in targets
    return program


@pytest.mark.parametrize(
    "options",
    [
        {"n_fft": 400, "hop": 160, "win_length": 300},  # a window shorter than the FFT; the trim is 1.25 hops
        {"n_fft": 60, "hop": 24},  # the trim of 30 is not a whole number of hops
        {"n_fft": 64, "hop": 16, "center": False, "window": "random"},
        {"n_fft": 64, "hop": 16, "normalized": True},
        {"n_fft": 64, "hop": 16, "window": "none"},
    ],
    ids=["short-window", "trim-between-hops", "not-centred", "normalized", "rectangular"],
)
def test_fp32_rewritten_program_equals_istft_at_any_frame_count(options):
    module = InverseStft(**options).eval()
    program = rewritten(module, spectrum(module.bins, 20))
    assert "window" not in program.state_dict  # in the kernels now
    cases = [spectrum(module.bins, frames, seed=frames) for frames in (2, 3, 9, 64)]
    assert_program_matches_eager(program, module, cases, atol=REWRITE_ATOL, rtol=REWRITE_RTOL)


def test_fp32_a_batch_of_spectra_of_fixed_length_is_rewritten_per_item():
    # torch.export cannot trace torch.istft of a batch over a dynamic number of frames (its guards fail).
    module = InverseStft(64, 16).eval()
    inputs = spectrum(module.bins, 20, batch=3)
    program = rewritten(module, inputs, dynamic_shapes=None)
    torch.testing.assert_close(program.module()(*inputs), module(*inputs), atol=REWRITE_ATOL, rtol=REWRITE_RTOL)


def test_does_nothing_on_a_spectrum_not_from_torch_complex_a_length_or_a_vanishing_envelope():
    class Polar(InverseStft):
        def forward(self, magnitude, phase):
            return torch.istft(torch.polar(magnitude.abs(), phase), self.n_fft, self.hop, window=self.window)

    class WithLength(InverseStft):
        def forward(self, real, imaginary):
            return torch.istft(torch.complex(real, imaginary), self.n_fft, self.hop, window=self.window, length=300)

    cases = {
        Polar(64, 16): "not built by torch.complex",
        WithLength(64, 16): "given an output length",
        # A Hann window without centring: its envelope is zero at the first sample.
        InverseStft(64, 16, center=False): "falls to zero",
    }
    for module, reason in cases.items():
        program = export_aten(module.eval(), spectrum(module.bins, 20))
        rewrite = InverseStftAsConvolutionPass(program)
        assert not rewrite(program.graph_module).modified
        assert len(rewrite.skipped) == 1 and reason in rewrite.skipped[0][1], rewrite.skipped
