"""A codebook search (argmax, argmin, max.dim, min.dim over the last dimension) as max poolings: delegated, exact,
ties broken as PyTorch breaks them; a residual vector quantizer of two codebooks becomes one delegate."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

import audiodeploy
from audiodeploy.lowering.passes.argmax_as_max_pooling import ArgmaxAsMaxPoolingPass
from tests.pipeline import assert_rewrites, export_aten, run_lowered

FRAMES = Dim("frames", min=4, max=64)
LENGTHS = (20, 4, 64, 37)


class TiedSearch(torch.nn.Module):
    """Integer-valued scores (floors of a projection): most rows hold several largest entries."""

    def __init__(self, codes: int = 8) -> None:
        super().__init__()
        self.proj = torch.nn.Conv1d(4, codes, 1)

    def forward(self, x):
        return torch.floor(self.proj(x)).transpose(1, 2).argmax(-1)


class ResidualVectorQuantizer(torch.nn.Module):
    """DAC's residual vector quantizer in a few lines: per codebook, project the residual, pick the code of the
    largest cosine score, subtract its projected entry from the residual; the codes stacked."""

    def __init__(self, channels: int = 6, dim: int = 3, codes: int = 16, codebooks: int = 2) -> None:
        super().__init__()
        self.ins = torch.nn.ModuleList(torch.nn.Conv1d(channels, dim, 1) for _ in range(codebooks))
        self.outs = torch.nn.ModuleList(torch.nn.Conv1d(dim, channels, 1) for _ in range(codebooks))
        self.codebooks = torch.nn.ParameterList(torch.randn(codes, dim) for _ in range(codebooks))

    def forward(self, x):
        residual, found = x, []
        for project_in, project_out, codebook in zip(self.ins, self.outs, self.codebooks):
            latents = project_in(residual)
            rows = F.normalize(latents.transpose(1, 2).reshape(-1, codebook.shape[1]))
            index = (rows @ F.normalize(codebook).t()).max(1)[1]
            residual = residual - project_out(F.embedding(index, codebook).t()[None])
            found.append(index.reshape(1, -1))
        return torch.stack(found, 1)


def _lowered_codes_match_eager(module: torch.nn.Module, seed: int) -> dict[str, int]:
    """``module`` lowered at a dynamic length and run at several: the same codes as eager, bit for bit. What it
    leaves outside its one delegate."""
    generator = torch.Generator().manual_seed(seed)
    cases = [(3 * torch.randn(1, _channels(module), n, generator=generator),) for n in LENGTHS]
    lowered = audiodeploy.lower(module, cases[0], dynamic_shapes=({2: FRAMES},))
    report = lowered.report.methods["forward"]
    assert report.delegates == 1, report
    assert "ArgmaxAsMaxPoolingPass" in report.rewrites, report.rewrites
    for case in cases:
        with torch.no_grad():
            expected = module(*case)
        actual = run_lowered(lowered, case)
        assert actual.dtype == torch.int64 and torch.equal(actual, expected), (case[0].shape, actual, expected)
    return report.ops_outside_delegates


def _channels(module: torch.nn.Module) -> int:
    first = next(m for m in module.modules() if isinstance(m, torch.nn.Conv1d))
    return first.in_channels


def test_fp32_tied_search_picks_the_first_largest_in_one_delegate():
    torch.manual_seed(0)
    module = TiedSearch().eval()
    with torch.no_grad():
        scores = torch.floor(module.proj(3 * torch.randn(1, 4, 64))).transpose(1, 2)
    assert ((scores == scores.amax(-1, keepdim=True)).sum(-1) > 1).any(), "the case has no tie"
    # The index is a float inside the delegate; its int64 cast is the one op after it.
    assert _lowered_codes_match_eager(module, seed=1) == {"dim_order_ops._to_dim_order_copy": 1}


def test_fp32_residual_vector_quantizer_codes_are_eager_codes_in_one_delegate():
    torch.manual_seed(0)
    outside = _lowered_codes_match_eager(ResidualVectorQuantizer().eval(), seed=2)
    assert outside == {"dim_order_ops._to_dim_order_copy": 1}, outside


class EverySearch(torch.nn.Module):
    def forward(self, x):
        scores = x.transpose(1, 2)
        largest, first = scores.max(-1)
        smallest, last = scores.min(2, keepdim=True)
        return first, largest, last, smallest, scores.argmax(-1, keepdim=True), scores.argmin(-1)


def test_fp32_every_search_form_is_max_poolings():
    cases = [(torch.floor(3 * torch.randn(1, 5, n)),) for n in (20, 4, 64)]
    counts = {
        "aten.argmax.default": 0,
        "aten.argmin.default": 0,
        "aten.min.dim": 0,
        "aten.max.dim": 8,  # two max poolings a search
        "aten._to_copy.default": 4,
    }
    assert_rewrites(EverySearch(), cases, "ArgmaxAsMaxPoolingPass", counts, dynamic_shapes=({2: FRAMES},))


class OtherSearches(torch.nn.Module):
    def forward(self, x, n):
        return x.argmax(1), x.max(-1)[0], n.argmax(-1), x.double().argmin(-1)


def test_leaves_other_searches_with_their_reasons():
    ep = export_aten(OtherSearches(), (torch.randn(2, 5, 3), torch.randint(0, 9, (2, 3))))
    rewrite = ArgmaxAsMaxPoolingPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "it does not select along the last dimension",
        "its input is not a float32 tensor of one or more dimensions",
        "its input is not a float32 tensor of one or more dimensions",
        "nothing reads its indices",
    ], rewrite.skipped
