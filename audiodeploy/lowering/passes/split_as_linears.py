"""Write a split along the last dimension as linears, which XNNPACK delegates.

ExecuTorch 1.5.1's XNNPACK partitioner has no config for ``split_with_sizes``
(``split`` and ``chunk`` lower to it), and declines a ``slice_copy`` whose input
has a dynamic size: a split cuts the delegate wherever it is. Speech encoders
split in two places, both along the last dimension: a packed q/k/v projection
(torchaudio's ``nn.MultiheadAttention`` in WavLM) and WavLM's two-way gate. The
pass writes each piece as a linear, in one of two forms::

    before

    x ── linear(W, b) ── split([C, C, C], -1) ── getitem(i) ──

    after, the split input is a linear with constant weights and nothing else reads it

    x ── linear(W[iC:(i+1)C], b[iC:(i+1)C]) ──          (one linear per piece; W itself is dropped)

    before

    g [.., 2] ── split(1, -1) ── getitem(i) ──

    after, a narrow split input (at most MAX_SELECTED_FEATURES)

    g [.., 2] ── linear(E_i) ──                          E_i: rows of the identity, a constant

The first form computes exactly what the packed linear computed, row for row.
The second multiplies by zeros and ones: exact for finite values (a non-finite
value in one feature would spread a NaN to the others' ``0 *`` terms), and cheap
only when the split input is narrow, hence the limit.

The pass leaves a split as it is, and does nothing on a program without one,
when it is not along the last dimension, that dimension is not fixed, the input
is not float32, or the input is neither a linear with constant weights read only
by the split nor at most :data:`MAX_SELECTED_FEATURES` wide.
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
    is_static,
    value,
)

aten = torch.ops.aten

MAX_SELECTED_FEATURES = 16
"""Widest split input written as selection linears: each output element then costs this many multiply-adds."""


class SplitAsLinearsPass(NodeRewritePass):
    targets = frozenset({aten.split.Tensor, aten.split_with_sizes.default})

    def rewrite(self, split: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node] | Skip:
        """Each piece of ``split`` (a ``getitem``) replaced by a linear."""
        x = split.args[0]
        val = value(x)
        if val is None or val.dtype != torch.float32 or val.dim() == 0:
            return Skip("not a float32 tensor with dimensions")
        if arguments(split)["dim"] % val.dim() != val.dim() - 1 or not is_static(val.shape[-1]):
            return Skip("it does not split a last dimension of fixed size")
        if not all(u.target == operator.getitem for u in split.users):
            return Skip("its pieces are not all read by getitem")
        bounds = _piece_bounds(split, int(val.shape[-1]))
        packed = _packed_linear(x, self.constants)
        if packed is None and val.shape[-1] > MAX_SELECTED_FEATURES:
            return Skip(f"it splits {val.shape[-1]} features, more than {MAX_SELECTED_FEATURES} selected by a linear")
        replacements = {}
        for piece in list(split.users):
            start, end = bounds[piece.args[1]]
            with self.graph.inserting_before(piece):
                if packed is not None:
                    linear_input, weight, bias = packed
                    args = [linear_input, self._piece(weight, self.constants[weight][start:end])]
                    if bias is not None:
                        args.append(self._piece(bias, self.constants[bias][start:end]))
                else:
                    selection = torch.eye(int(val.shape[-1]))[start:end]
                    args = [
                        x,
                        add_constant(self.exported_program, self.graph, f"{split.name}_select_{start}", selection),
                    ]
                replacements[piece] = insert_op(self.graph, aten.linear.default, tuple(args), origin=split)
        return replacements

    def _piece(self, source: torch.fx.Node, data: torch.Tensor) -> torch.fx.Node:
        return add_constant(self.exported_program, self.graph, f"{source.name}_piece", data)


def _piece_bounds(split: torch.fx.Node, width: int) -> list[tuple[int, int]]:
    if split.target == aten.split.Tensor:
        step = int(split.args[1])
        return [(start, min(start + step, width)) for start in range(0, width, step)]
    bounds, start = [], 0
    for size in split.args[1]:
        bounds.append((start, start + int(size)))
        start += int(size)
    return bounds


def _packed_linear(
    x: torch.fx.Node, sources: dict[torch.fx.Node, torch.Tensor]
) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node | None] | None:
    """(input, weight, bias) of a linear with constant weights that only the split reads; else None."""
    if x.op != "call_function" or x.target != aten.linear.default or len(x.users) != 1:
        return None
    given = arguments(x)
    linear_input, weight, bias = given["input"], given["weight"], given["bias"]
    if weight not in sources or (bias is not None and bias not in sources):
        return None
    return linear_input, weight, bias
