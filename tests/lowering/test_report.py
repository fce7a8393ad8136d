"""The lowering report's list of delegated GEMMs: each with its module and its FLOPs as a size expression."""

from __future__ import annotations

import torch
from torch import nn
from torch.export import Dim

import audiodeploy
from audiodeploy.lowering import LoweringReport
from audiodeploy.program.sizes import evaluate, symbol_values


class ConvThenDense(nn.Module):
    """A strided convolution (5 * frames + 5 samples to frames), an upsampling and a dense layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 10, stride=5)
        self.up = nn.ConvTranspose1d(8, 4, 4, stride=2)
        self.dense = nn.Linear(8, 6)

    def forward(self, waveform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frames = self.conv(waveform.unsqueeze(1))
        return self.dense(frames.transpose(1, 2)), self.up(frames)


def test_every_delegated_gemm_is_listed_in_order_with_its_flops_at_any_length():
    module = ConvThenDense().eval()
    samples = 5 * Dim("frames", min=20, max=800) + 5  # whole frames, as the recipes export lengths
    lowered = audiodeploy.lower(module, (torch.randn(1, 405),), dynamic_shapes=({1: samples},))
    method = lowered.report.methods["forward"]
    modules = [g.gemm.split(" @ ")[1] for g in method.delegated_gemms]
    assert modules[0] == "conv" and set(modules) == {"conv", "up", "dense"}
    assert {g.delegate for g in method.delegated_gemms} == {0}
    flops: dict[int, dict[str, int]] = {}
    for frames in (20, 81, 800):
        values = symbol_values(method.size_symbols, [(1, 5 * frames + 5)])
        at = flops.setdefault(frames, {})
        for module_path, gemm in zip(modules, method.delegated_gemms, strict=True):
            at[module_path] = at.get(module_path, 0) + int(evaluate(gemm.flops, values))
        assert at["dense"] == 2 * frames * 6 * 8
    # Rewrites change how the convolutions are computed (a strided one as a GEMM over phases), so their FLOPs are
    # the program's, not the module's; each still grows with the frames.
    for name in ("conv", "up"):
        assert flops[20][name] > 0 and flops[800][name] == 40 * flops[20][name]
    assert LoweringReport.from_dict(lowered.report.to_dict()) == lowered.report
