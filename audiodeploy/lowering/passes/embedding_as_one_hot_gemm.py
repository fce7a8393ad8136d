"""Write a constant codebook's lookup as a one-hot GEMM XNNPACK delegates.

A residual vector quantizer (DAC's ``self.codebook(indices)``) looks up the code it picked in a constant codebook
``W [K, D]`` to subtract it from the residual. ExecuTorch 1.5.1's XNNPACK partitioner has no config for
``embedding``, nor for an integer index, so the lookup and everything that reads it (the next codebook's search)
run outside the delegate. Where the index is a float32 cast to an integer (:mod:`.argmax_as_max_pooling` leaves
its index so), the lookup is a GEMM of a one-hot row with the codebook::

    before

    f [..] float32 ── _to_copy(int64) ── embedding(W [K, D]) ── [.., D]

    after

    f [..] float32 ── abs ── floor ── view [.., 1] ── sub([0, .., K - 1]) ── abs ── neg ── add(1) ── relu
        ── linear(W^T [D, K]) ── [.., D]

An index of integers that is not such a cast (codes the program takes as input, DAC's ``from_codes``) is cast to
float32 first; that cast runs outside the delegate, and :mod:`.casts_before_data_movement` moves it up to the
program's input, past the selections between.

``floor(|f|)`` is the cast's truncation for every ``f > -1`` (a lower index fails the lookup in PyTorch). With an
integer ``i``, ``relu(1 - |k - i|)`` is exactly 1 at ``k = i`` and 0 elsewhere, and the GEMM adds one codebook
entry times 1 to zeros: the lookup's own numbers, bit for bit. An index outside ``[0, K)``, which PyTorch refuses,
gives zeros.

The pass leaves a lookup as it is, and does nothing on a program without one, unless its table is a constant
float32 ``[K, D]`` (a parameter, buffer or constant the program does not compute) of at most 4096 rows, and its
index is a cast of a float32 tensor, or integers read from the program's input (moved: sliced, viewed, one entry
of an ``unbind``; positions computed in the program are another pass's), with at most one dimension that depends
on the input length.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import (
    MOVES_ELEMENTS,
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    insert_reshape,
    static_view_sizes,
    value,
)

aten = torch.ops.aten

_LARGEST_ONE_HOT = 4096
"""Rows of the largest table looked up as a one-hot GEMM: codec codebooks have 1024 to 2048; a text vocabulary
of tens of thousands would cost that many multiply-adds per token where the lookup copies one row."""


class EmbeddingAsOneHotGemmPass(NodeRewritePass):
    targets = frozenset({aten.embedding.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        table = self.constants.get(given["weight"])
        if table is None or table.dim() != 2 or table.dtype != torch.float32:
            return Skip("its table is not a constant float32 [K, D]")
        if table.shape[0] > _LARGEST_ONE_HOT:
            return Skip(
                f"its table has more than {_LARGEST_ONE_HOT} rows: a one-hot GEMM would cost that many "
                "multiply-adds per entry looked up"
            )
        index = given["indices"]
        val = value(index)
        if val is None or val.dtype.is_floating_point or val.dtype.is_complex or val.dtype == torch.bool:
            return Skip("its index is not a tensor of integers")
        sizes = static_view_sizes([*val.shape, 1])
        if sizes is None:
            return Skip("more than one dimension of its index depends on the input length")
        if _is_cast_from_float32(index):
            index = index.args[0]
        elif self._read_from_input(index):
            index = insert_op(self.graph, aten._to_copy.default, (index,), {"dtype": torch.float32}, origin=node)
        else:
            return Skip("its index is neither cast from float32 nor read from the program's input")
        rows = int(table.shape[0])
        positive = insert_op(self.graph, aten.abs.default, (index,), origin=node)
        truncated = insert_op(self.graph, aten.floor.default, (positive,), origin=node)
        column = insert_reshape(self.graph, truncated, sizes, origin=node)
        positions = add_constant(
            self.exported_program, self.graph, "lookup_positions", torch.arange(rows, dtype=torch.float32)
        )
        offsets = insert_op(self.graph, aten.sub.Tensor, (column, positions), origin=node)
        distances = insert_op(self.graph, aten.abs.default, (offsets,), origin=node)
        negated = insert_op(self.graph, aten.neg.default, (distances,), origin=node)
        peaks = insert_op(self.graph, aten.add.Tensor, (negated, 1.0), origin=node)
        one_hot = insert_op(self.graph, aten.relu.default, (peaks,), origin=node)
        weight = add_constant(self.exported_program, self.graph, "lookup_table", table.t())
        self.release_constant(given["weight"])
        return insert_op(self.graph, aten.linear.default, (one_hot, weight), origin=node)

    def _read_from_input(self, index: torch.fx.Node) -> bool:
        """Whether ``index`` is the program's input, or elements of it moved (selected, viewed): codes to decode,
        not positions the program computes (whose own passes take them)."""
        while index.op == "call_function":
            if index.target in MOVES_ELEMENTS:
                index = index.args[0]
            elif index.target is operator.getitem and getattr(index.args[0], "target", None) is aten.unbind.int:
                index = index.args[0].args[0]  # one codebook's codes of an unbind: elements of what it unbinds
            else:
                break
        return index.op == "placeholder" and index.name in self.exported_program.graph_signature.user_inputs


def _is_cast_from_float32(node: torch.fx.Node) -> bool:
    source = node.args[0] if node.target == aten._to_copy.default and set(node.kwargs) == {"dtype"} else None
    val = value(source) if isinstance(source, torch.fx.Node) else None
    return val is not None and val.dtype == torch.float32
