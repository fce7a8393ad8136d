"""The pieces of an unbind as selections: a quantizer that iterates over its codebooks' codes is one delegate after
one cast of its input."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from tests.pipeline import assert_rewrites, lower_and_compare

FRAMES = Dim("frames", min=4, max=64)
DYNAMIC = ({2: FRAMES},)


class IteratedCodebooks(torch.nn.Module):
    """EnCodec's and X-Codec's residual quantizer decode in a few lines: ``for indices in codes.transpose(0, 1)``,
    each codebook's codes looked up and the lookups summed."""

    def __init__(self, codebooks: int = 3, codes: int = 16, dim: int = 4, transposed: bool = True) -> None:
        super().__init__()
        self.codebooks = torch.nn.ParameterList(torch.randn(codes, dim) for _ in range(codebooks))
        self.transposed = transposed

    def forward(self, codes):
        pieces = codes.transpose(0, 1) if self.transposed else codes[0]
        latents = 0.0
        for codebook, indices in zip(self.codebooks, pieces):
            latents = latents + F.embedding(indices, codebook)
        return latents.transpose(-1, -2)


def _codes(frames: int, seed: int = 0) -> tuple[torch.Tensor]:
    return (torch.randint(0, 16, (1, 3, frames), generator=torch.Generator().manual_seed(seed)),)


def test_fp32_iterated_codebooks_are_one_delegate_after_one_cast():
    torch.manual_seed(0)
    module = IteratedCodebooks().eval()
    cases = [_codes(n, seed=n) for n in (20, 4, 64)]
    stock = lower_and_compare(module, cases[0], rewrite=False, dynamic_shapes=DYNAMIC)
    report = lower_and_compare(module, cases[0], dynamic_shapes=DYNAMIC, also_run=cases[1:], atol=0.0)
    assert stock.ops_outside_delegates.get("aten.embedding", 0) == 3, stock
    assert report.delegates == 1 and report.ops_outside_delegates == {"dim_order_ops._to_dim_order_copy": 1}, report
    assert "UnbindAsSelectsPass" in report.rewrites


def test_fp32_pieces_of_a_transposed_tensor_select_from_the_tensor_itself():
    torch.manual_seed(0)
    cases = [_codes(n, seed=n) for n in (20, 4, 64)]
    for transposed in (True, False):
        counts = {"aten.unbind.int": 0, "aten.transpose.int": 1, "aten.embedding.default": 0}
        result = assert_rewrites(
            IteratedCodebooks(transposed=transposed).eval(),
            cases,
            "UnbindAsSelectsPass",
            counts,
            dynamic_shapes=DYNAMIC,
            atol=0.0,
        )
        (cast,) = result.program.graph.find_nodes(op="call_function", target=torch.ops.aten._to_copy.default)
        assert cast.args[0].op == "placeholder"  # one cast of the input, the codebooks sliced from its channels


def test_fp32_pieces_restacked_in_another_order_are_selections():
    # torch.export hands each piece of an unbind to its readers through a getitem, even a stack of all of them.
    class Restacked(torch.nn.Module):
        def forward(self, x):
            return torch.stack(x.unbind(1)[::-1], dim=-1)

    cases = [(torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(seed)),) for seed in (0, 1)]
    assert_rewrites(Restacked(), cases, "UnbindAsSelectsPass", {"aten.unbind.int": 0, "aten.select.int": 3}, atol=0.0)
