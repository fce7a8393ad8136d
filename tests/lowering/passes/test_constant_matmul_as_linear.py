"""Products with a constant matrix on the right, as linears: each constant is packed one way, eager's numbers."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.constant_matmul_as_linear import ConstantMatmulAsLinearPass
from tests.pipeline import assert_rewrites, export_aten

ROWS = Dim("rows", min=2, max=64)


class SearchAndLookUp(torch.nn.Module):
    """One residual quantizer step as EnCodec writes it: the search multiplies by ``embed.t()``, the lookup of
    the picked code reads ``embed`` as a table."""

    def __init__(self, codes: int = 16, size: int = 8) -> None:
        super().__init__()
        self.register_buffer("embed", torch.randn(codes, size))

    def forward(self, x):
        scores = 2 * x @ self.embed.t() - self.embed.pow(2).sum(1)
        picked = scores.argmax(-1)
        return x - torch.nn.functional.embedding(picked, self.embed), picked


class BothWays(torch.nn.Module):
    """One matrix read as a linear's weight and as the right operand of a product, of a 2-D and a 3-D input."""

    def __init__(self, size: int = 8) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(size, size))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight) + x @ self.weight + (x[None] @ self.weight)[0]


def test_products_of_a_constant_are_linears_with_eager_numbers():
    cases = [(torch.randn(n, 8),) for n in (10, 2, 64)]
    counts = {"aten.matmul.default": 0, "aten.mm.default": 0, "aten.linear.default": 3}
    assert_rewrites(BothWays(), cases, "ConstantMatmulAsLinearPass", counts, dynamic_shapes=({0: ROWS},))


def test_the_codebook_is_read_as_two_linears_of_different_bytes():
    torch.manual_seed(0)
    result = assert_rewrites(
        SearchAndLookUp(),
        [(torch.randn(n, 8),) for n in (12, 2, 64)],
        "ConstantMatmulAsLinearPass",
        {"aten.matmul.default": 0, "aten.embedding.default": 0, "aten.linear.default": 2},
        dynamic_shapes=({0: ROWS},),
    )
    program = result.program
    linears = program.graph.find_nodes(op="call_function", target=torch.ops.aten.linear.default)
    constants = {**program.state_dict, **program.constants}
    names = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs}
    weights = [constants[names[node.args[1].name]] for node in linears]
    assert sorted(tuple(w.shape) for w in weights) == [(8, 16), (16, 8)]
    search, lookup = sorted(weights, key=lambda w: w.shape[0], reverse=True)
    torch.testing.assert_close(search, lookup.t(), rtol=0, atol=0)  # the same numbers, stored each way round


class NotConstantMatrices(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("left", torch.randn(8, 4))
        self.register_buffer("batch", torch.randn(3, 4, 4))

    def forward(self, x, y):
        return x @ y, self.left @ x, x[None].expand(3, -1, -1) @ self.batch


def test_leaves_products_without_a_constant_matrix_on_the_right_with_the_reason():
    ep = export_aten(NotConstantMatrices(), (torch.randn(4, 4), torch.randn(4, 4)))
    rewrite = ConstantMatmulAsLinearPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "its right operand is a 3-D torch.float32 constant, not a float matrix",
        "its right operand is not a constant",
        "its right operand is not a constant",
    ], rewrite.skipped
