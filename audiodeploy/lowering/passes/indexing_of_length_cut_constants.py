"""Apply a ``select`` or fixed ``slice`` of a constant cut to the length to the constant itself; drop no-op slices.

Rotary position embeddings keep their cos and sin tables stacked, ``[2, T, ...]``,
and each attention layer picks ``table[0, :T]`` and ``table[1, :T]``. Once the table
is a constant cut to the length (:mod:`length_only_values_as_constants`, or a
buffer sliced to the length), each pick is a ``select`` and a slice to the size the
tensor already has. ExecuTorch 1.5.1's XNNPACK partitioner declines a ``select_copy``
or ``slice_copy`` of a tensor of a symbolic size, so they run between delegates and
cut the delegate in every layer. The pick is a constant too, cut to the length::

    before                                           after

    table [2, Tmax, D] ── slice(1, 0, n) ──          cos [Tmax, D] (constant) ── slice(0, 0, n) ──
        ── select(0, 0) ── slice(0, 0, n) ──             (at the first cut's place, before the first delegate)

A cut of a constant still runs outside the delegate (XNNPACK slices static shapes
only), but where the first cut was, before the first delegate, instead of between
two. A slice that keeps the whole tensor at every length (``x[:x.size(0)]``, or SEW's
``pooled[..., :min_length]``, which sympy does not see is whole) is dropped, whatever it
slices. Between the cut and the pick, ops that change nothing (``type_as`` of the
same dtype, ``alias``) are looked through.

The pass leaves a ``select`` or ``slice`` as it is, and does nothing on a program
without one, when it does not index (through such ops) a slice of a constant
placeholder along one dimension from its start, it indexes along that dimension,
its index or bounds are not integers, or its step is not 1.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    sizes_always,
    value,
)

aten = torch.ops.aten

_NO_OPS = {aten.type_as.default, aten.alias.default}
"""Ops that give their first argument back when its dtype is already the result's."""


class IndexingOfLengthCutConstantsPass(NodeRewritePass):
    targets = frozenset({aten.select.int, aten.slice.Tensor})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        x_val, out = value(x), value(node)
        if x_val is None or out is None:
            return Skip("not a tensor")
        if node.target == aten.slice.Tensor:
            if given["step"] != 1:
                return Skip("a slice with a step")
            if given["start"] in (0, None) and _same_shape(x_val.shape, out.shape):
                return x
        cut = _length_cut(x, self.constants)
        if isinstance(cut, Skip):
            return cut
        constant, cut_dim, start, end = cut
        dim = given["dim"] % x_val.dim()
        if dim == cut_dim:
            return Skip("indexes the dimension cut to the length")
        data = self.constants[constant]
        if node.target == aten.select.int:
            if not isinstance(given["index"], int):
                return Skip("a symbolic index")
            data, cut_dim = data.select(dim, given["index"]), cut_dim - (dim < cut_dim)
        else:
            if not all(isinstance(b, (int, type(None))) for b in (given["start"], given["end"])):
                return Skip("a slice with symbolic bounds")
            index = [slice(None)] * data.dim()
            index[dim] = slice(given["start"], given["end"])
            data = data[tuple(index)]
        picked = add_constant(self.exported_program, self.graph, f"{constant.name}_{node.name}", data)
        self.release_constant(constant)
        first_cut = _cut_node(x)
        with self.graph.inserting_after(first_cut):
            return insert_op(self.graph, aten.slice.Tensor, (picked, cut_dim, start, end), origin=first_cut)


def _through_no_ops(node: torch.fx.Node) -> torch.fx.Node:
    while node.op == "call_function" and node.target in _NO_OPS:
        source = node.args[0]
        if value(source) is None or value(source).dtype != value(node).dtype:  # type: ignore[union-attr]
            break
        node = source
    return node


def _cut_node(x: torch.fx.Node) -> torch.fx.Node:
    return _through_no_ops(x)


def _length_cut(
    x: torch.fx.Node, constants: dict[torch.fx.Node, torch.Tensor]
) -> tuple[torch.fx.Node, int, object, object] | Skip:
    """``(constant, dim, start, end)`` of ``x = constant[..., start:end, ...]`` (through ops that change nothing)."""
    cut = _cut_node(x)
    if cut.target != aten.slice.Tensor:
        return Skip("indexes no slice of a constant")
    given = arguments(cut)
    constant = given["input"]
    if constant not in constants:
        return Skip("indexes a slice of something other than a constant")
    if given["step"] != 1:
        return Skip("indexes a slice with a step")
    return constant, given["dim"] % constants[constant].dim(), given["start"], given["end"]


def _same_shape(a: torch.Size, b: torch.Size) -> bool:
    """Whether two shapes are the same for every length of the export's range (:func:`sizes_always`: sympy, else
    each length; SEW slices its pooled frames, ``(T - 1) // 2``, to its positions', ``(T - 3) // 2 + 1``)."""
    return len(a) == len(b) and all(sizes_always(operator.eq, x, y) for x, y in zip(a, b))
