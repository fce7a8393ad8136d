"""Write a replicate padding of the last dimension as a concatenation XNNPACK delegates.

``F.pad(x, (l, r), mode="replicate")`` (BigVGAN's anti-aliased activations pad
every resampling this way) exports as ``aten.pad`` with mode ``"replicate"``,
which edge lowering decomposes into ``arange``, ``clamp`` and ``index``:
ExecuTorch 1.5.1's XNNPACK partitioner has no config for any of them, so each
padding cuts the delegate. The padded signal is the input between copies of its
first and last samples, and XNNPACK concatenates (also along a dynamic length).
The first and last samples themselves are the hard part when the length ``T``
is symbolic: 1.5.1 declines a slice whose input size is symbolic, so they are
selected by a matrix product with a ``[T, l + r]`` selector of one-hot columns
instead::

    before

    x [.., T] ── pad([l, r], "replicate") ── [.., l + T + r]

    after, T fixed

    x ─┬─ slice(-1, 0, 1) ──── mul(ones [l]) ──┐
       ├───────────────────────────────────────┼─ cat(-1) ── [.., l + T + r]
       └─ slice(-1, T-1, T) ── mul(ones [r]) ──┘

    after, T symbolic

    x ── view [1, M, T] ─┬──────────────────────────────────── bmm ── view [.., l + r] ─┬─ slice(-1, 0, l) ───┐
                         │                                      │                       └─ slice(-1, l, l+r) ─┤
                         └─ conv1d(zeros [1, M, 1], bias 1) ── ones [1, 1, T]           x ───────────────────┼─ cat(-1)
                            ── conv1d(E [l + r, 1, 3], padding 1) ── permute ── S [1, T, l + r] ──┘

``E`` holds ``l`` kernels ``[-1, 1, 0]`` (a one at the first sample of a
length-``T`` row of ones, zero elsewhere: the zero padding is the only
difference between neighbours) and ``r`` kernels ``[0, 1, -1]`` (a one at the
last sample). The selector depends on ``T`` alone, so one is computed per
symbolic length and pair ``(l, r)`` and shared by every padding of that length;
its row of ones is read from the first such padding's input. ``M`` is the
product of the leading dimensions (the view is skipped when ``x`` is
``[1, M, T]`` already).

The results equal the padding's exactly for finite inputs: every product is by
one or zero and every sum adds zeros. An infinite or NaN sample makes the row
of ones NaN there (``0 * inf``), so a padding whose selector was read from that
tensor gets NaN edges where replicate padding would copy finite ones.

The pass leaves a padding as it is, and does nothing on a program without one,
unless it is a replicate padding (``aten.pad`` with mode ``"replicate"``, or
``replication_pad1d``) of the last dimension only, by non-negative amounts, of
a float32 tensor whose leading dimensions are fixed.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    insert_reshape,
    is_static,
    value,
)

aten = torch.ops.aten

# Cross-correlation kernels over a zero-padded row of ones: out[j] = u[j] - u[j-1] is one at j = 0 only,
# out[j] = u[j] - u[j+1] one at j = T - 1 only.
_FIRST_SAMPLE_KERNEL = (-1.0, 1.0, 0.0)
_LAST_SAMPLE_KERNEL = (0.0, 1.0, -1.0)


class ReplicatePaddingAsConcatPass(NodeRewritePass):
    targets = frozenset({aten.pad.default, aten.replication_pad1d.default})

    def __init__(self, exported_program: torch.export.ExportedProgram) -> None:
        super().__init__(exported_program)
        # Per symbolic length: the row of ones; per (length, l, r): the selector S.
        self._ones: dict[str, torch.fx.Node] = {}
        self._selectors: dict[tuple[str, int, int], torch.fx.Node] = {}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        padding = given["pad" if node.target == aten.pad.default else "padding"]
        if node.target == aten.pad.default and given["mode"] != "replicate":
            return Skip("not a replicate padding")
        val = value(x)
        if val is None or val.dtype != torch.float32 or val.dim() < 2:
            return Skip("not a float32 tensor of two or more dimensions")
        if not (isinstance(padding, (list, tuple)) and len(padding) == 2 and all(isinstance(p, int) for p in padding)):
            return Skip("it pads more than the last dimension, or by symbolic amounts")
        left, right = padding
        if left < 0 or right < 0:
            return Skip("it crops (a negative padding)")
        if not all(is_static(size) for size in val.shape[:-1]):
            return Skip("a leading dimension is symbolic")
        if left == right == 0:
            return x
        length = val.shape[-1]
        if is_static(length):
            edges = self._sliced_edges(x, int(length), left, right, origin=node)
        else:
            edges = self._selected_edges(x, left, right, origin=node)
        return insert_op(self.graph, aten.cat.default, (edges[0] + [x] + edges[1], -1), origin=node)

    def _sliced_edges(
        self, x: torch.fx.Node, length: int, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right padding (each a list of zero or one node) from static slices of the ends."""
        parts: list[list[torch.fx.Node]] = []
        for count, start in ((left, 0), (right, length - 1)):
            if count == 0:
                parts.append([])
                continue
            sample = insert_op(self.graph, aten.slice.Tensor, (x, -1, start, start + 1), origin=origin)
            ones = add_constant(self.exported_program, self.graph, "replicate_padding_ones", torch.ones(count))
            parts.append([insert_op(self.graph, aten.mul.Tensor, (sample, ones), origin=origin)])
        return parts[0], parts[1]

    def _selected_edges(
        self, x: torch.fx.Node, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right padding selected from the rows of ``x`` by one matrix product."""
        val = value(x)
        assert val is not None
        leading = [int(size) for size in val.shape[:-1]]
        rows = math.prod(leading)
        if leading == [1, rows]:
            matrix = x
        else:
            matrix = insert_reshape(self.graph, x, [1, rows, -1], origin=origin)
        selector = self._selector(matrix, left, right, origin=origin)
        selected = insert_op(self.graph, aten.bmm.default, (matrix, selector), origin=origin)
        if leading != [1, rows]:
            selected = insert_reshape(self.graph, selected, [*leading, left + right], origin=origin)
        parts: list[list[torch.fx.Node]] = []
        for start, stop in ((0, left), (left, left + right)):
            if start == stop:
                parts.append([])
            else:
                parts.append([insert_op(self.graph, aten.slice.Tensor, (selected, -1, start, stop), origin=origin)])
        return parts[0], parts[1]

    def _selector(self, matrix: torch.fx.Node, left: int, right: int, *, origin: torch.fx.Node) -> torch.fx.Node:
        """``S [1, T, l + r]``: ``l`` one-hot columns at the first sample, ``r`` at the last (see the module)."""
        key = _length_key(matrix)
        if (key, left, right) in self._selectors:
            return self._selectors[key, left, right]
        ones = self._ones.get(key)
        if ones is None:
            rows = _size(matrix, 1)
            zeros = add_constant(self.exported_program, self.graph, "replicate_padding_zeros", torch.zeros(1, rows, 1))
            one = add_constant(self.exported_program, self.graph, "replicate_padding_bias", torch.ones(1))
            ones = insert_op(self.graph, aten.conv1d.default, (matrix, zeros, one), origin=origin)
            self._ones[key] = ones
        kernels = torch.tensor([_FIRST_SAMPLE_KERNEL] * left + [_LAST_SAMPLE_KERNEL] * right).unsqueeze(1)
        weight = add_constant(self.exported_program, self.graph, "replicate_padding_selector", kernels)
        one_hot = insert_op(self.graph, aten.conv1d.default, (ones, weight, None, [1], [1]), origin=origin)
        selector = insert_op(self.graph, aten.permute.default, (one_hot, [0, 2, 1]), origin=origin)
        self._selectors[key, left, right] = selector
        return selector


def _length_key(node: torch.fx.Node) -> str:
    """The symbolic length of ``node``'s last dimension, as a key that equal lengths share."""
    val = value(node)
    assert val is not None
    size: Any = val.shape[-1]
    return str(size.node.expr) if isinstance(size, torch.SymInt) else str(size)


def _size(node: torch.fx.Node, dim: int) -> int:
    val = value(node)
    assert val is not None
    return int(val.shape[dim])
