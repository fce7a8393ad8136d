"""Write a reflect padding of the last dimension as a concatenation XNNPACK delegates.

``F.pad(x, (l, r), mode="reflect")`` on a signal ``[N, C, T]`` (the padding of
EnCodec's, DAC's and UnivNet's convolutions) exports as ``aten.pad`` with mode
``"reflect"``, which edge lowering decomposes into ``arange``, ``sub``, ``abs``
and ``index``: ExecuTorch 1.5.1's XNNPACK partitioner has no config for them.
The padded signal is the input between its reversed edges, ``x[.., l:0:-1]`` on
the left and ``x[.., T-2:T-r-2:-1]`` on the right, and XNNPACK concatenates
(also along a dynamic length). When ``T`` is symbolic 1.5.1 declines any slice
of that dimension, so, as :mod:`.replicate_padding_as_concat` does for its
edges, the reversed samples are selected by a matrix product with a
``[T, l + r]`` selector of one-hot columns::

    before

    x [.., T] ── pad([l, r], "reflect") ── [.., l + T + r]

    after, T fixed

    x ─┬─ slice(-1, l, l+1) ── .. ── slice(-1, 1, 2) ──────────────┐
       ├───────────────────────────────────────────────────────────┼─ cat(-1) ── [.., l + T + r]
       └─ slice(-1, T-2, T-1) ── .. ── slice(-1, T-r-1, T-r) ──────┘

    after, T symbolic

    x ── view [1, M, T] ─┬──────────────────────────────────── bmm ── view [.., l + r] ─┬─ slice(-1, 0, l) ───┐
                         │                                      │                       └─ slice(-1, l, l+r) ─┤
                         └─ conv1d(zeros [1, M, 1], bias 1) ── ones [1, 1, T]           x ───────────────────┼─ cat(-1)
                            ── conv1d(E [l + r, 1, 2P+1], padding P) ── permute ── S [1, T, l + r] ─┘

Column ``j < l`` of ``S`` is one at sample ``l - j``, column ``l + j`` at sample
``T - 2 - j``. Over a row of ones ``u`` zero-padded by ``P = max(l, r) + 1``, a
one at sample ``k`` is ``u[t - k] - u[t - k - 1]`` and a one at sample
``T - 1 - k`` is ``u[t + k] - u[t + k + 1]`` (the padding's zeros are the only
difference between neighbours, as long as ``k < T``, which reflect padding
requires anyway), so ``E`` holds a ``1`` and a ``-1`` per column. The selector
depends on ``T`` alone: one is computed per symbolic length and pair ``(l, r)``
and shared by every padding of that length; its row of ones is read from the
first such padding's input. ``M`` is the product of the leading dimensions.

The results equal the padding's exactly for finite inputs: every product is by
one or zero and every sum adds zeros. An infinite or NaN sample makes the row
of ones NaN there (``0 * inf``), so a padding whose selector was read from that
tensor gets NaN edges where reflect padding would copy finite ones.

The pass leaves a padding as it is, and does nothing on a program without one,
unless it is a reflect padding (``aten.pad`` with mode ``"reflect"``, or
``reflection_pad1d``) of the last dimension only, by non-negative amounts, of a
float32 tensor whose leading dimensions are fixed.
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


class ReflectPaddingAsConcatPass(NodeRewritePass):
    targets = frozenset({aten.pad.default, aten.reflection_pad1d.default})

    def __init__(self, exported_program: torch.export.ExportedProgram) -> None:
        super().__init__(exported_program)
        # Per symbolic length: the row of ones; per (length, l, r): the selector S.
        self._ones: dict[str, torch.fx.Node] = {}
        self._selectors: dict[tuple[str, int, int], torch.fx.Node] = {}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        padding = given["pad" if node.target == aten.pad.default else "padding"]
        if node.target == aten.pad.default and given["mode"] != "reflect":
            return Skip("not a reflect padding")
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
        """The left and right padding as static slices of one sample each, in reflected order."""
        left_samples = [left - j for j in range(left)]
        right_samples = [length - 2 - j for j in range(right)]
        return (
            [insert_op(self.graph, aten.slice.Tensor, (x, -1, s, s + 1), origin=origin) for s in left_samples],
            [insert_op(self.graph, aten.slice.Tensor, (x, -1, s, s + 1), origin=origin) for s in right_samples],
        )

    def _selected_edges(
        self, x: torch.fx.Node, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right padding selected from the rows of ``x`` by one matrix product."""
        val = value(x)
        assert val is not None
        leading = [int(size) for size in val.shape[:-1]]
        rows = math.prod(leading)
        matrix = x if leading == [1, rows] else insert_reshape(self.graph, x, [1, rows, -1], origin=origin)
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
        """``S [1, T, l + r]``: the reflected samples' one-hot columns (see the module)."""
        key = _length_key(matrix)
        if (key, left, right) in self._selectors:
            return self._selectors[key, left, right]
        ones = self._ones.get(key)
        if ones is None:
            rows = _size(matrix, 1)
            zeros = add_constant(self.exported_program, self.graph, "reflect_padding_zeros", torch.zeros(1, rows, 1))
            one = add_constant(self.exported_program, self.graph, "reflect_padding_bias", torch.ones(1))
            ones = insert_op(self.graph, aten.conv1d.default, (matrix, zeros, one), origin=origin)
            self._ones[key] = ones
        weight = add_constant(
            self.exported_program, self.graph, "reflect_padding_selector", reflected_sample_kernels(left, right)
        )
        pad = max(left, right) + 1
        one_hot = insert_op(self.graph, aten.conv1d.default, (ones, weight, None, [1], [pad]), origin=origin)
        selector = insert_op(self.graph, aten.permute.default, (one_hot, [0, 2, 1]), origin=origin)
        self._selectors[key, left, right] = selector
        return selector


def reflected_sample_kernels(left: int, right: int) -> torch.Tensor:
    """``E [l + r, 1, 2P + 1]``: cross-correlated with a row of ones zero-padded by ``P = max(l, r) + 1``, kernel
    ``j < l`` is one at sample ``l - j`` only, kernel ``l + j`` at sample ``T - 2 - j`` only."""
    pad = max(left, right) + 1
    kernels = torch.zeros(left + right, 1, 2 * pad + 1)
    for j in range(left):  # u[t - k] - u[t - k - 1], k = l - j: taps at offsets -k and -k - 1
        k = left - j
        kernels[j, 0, pad - k] = 1.0
        kernels[j, 0, pad - k - 1] = -1.0
    for j in range(right):  # u[t + k] - u[t + k + 1], k = j + 1: one at sample T - 1 - k = T - 2 - j
        k = j + 1
        kernels[left + j, 0, pad + k] = 1.0
        kernels[left + j, 0, pad + k + 1] = -1.0
    return kernels


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
