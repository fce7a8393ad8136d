"""Write an LSTM of a fixed sequence length as its steps, in ops XNNPACK delegates.

``torch.export`` keeps ``nn.LSTM`` whole, as one ``aten.lstm.input``: EnCodec's
encoder and decoder each run a two-layer one over their frames. Edge lowering
then decomposes it as torch does (``unbind`` of the steps, ``chunk`` of the
gates into ``split_with_sizes``, ``squeeze`` and ``unsqueeze`` of the state,
``zeros`` for the initial state), and ExecuTorch 1.5.1's XNNPACK partitioner
declines ``split_with_sizes``, ``squeeze`` and ``full``: every step is cut into
delegates of its own (a two-layer LSTM over 50 frames gives about a hundred).
The pass writes the same computation in GEMMs, static slices, ``sigmoid``,
``tanh``, ``mul``, ``add`` and ``cat``, each of which XNNPACK delegates::

    before

    x [T, B, I] ── lstm(hx=(h0, c0), params, L layers) ── getitem 0 ── y [T, B, H]
                                                       ── getitem 1 ── h_n [L, B, H]
                                                       ── getitem 2 ── c_n [L, B, H]

    after, for each layer (x is the layer's input, the previous layer's y)

    x ── linear(W_ih, b_ih + b_hh) ── p [T, B, 4H]         one GEMM for the inputs of every step

    step t:  p ── slice(0, t, t + 1) ──────────┐
             h ── linear(W_hh) ─────────────── add ── sigmoid ── slice [0, H)   ── i
                                                │             ── slice [H, 2H)  ── f
                                                │             ── slice [3H, 4H) ── o
                                                └── slice [2H, 3H) ── tanh ───── g
             c = f * c + i * g        h = o * tanh(c)            (h, c: [1, B, H])

    y = cat(h of steps 0 .. T - 1, 0)     h_n = cat(last h of each layer, 0), c_n alike

A zero initial state (``nn.LSTM`` called without one) starts the first step at
``gates = p[0]`` and ``c = i * g``: no ``zeros`` op stays in the program. A
bidirectional layer runs a second pass over the steps in reverse order and
concatenates the two outputs along the features; ``batch_first`` slices and
concatenates along dimension 1 instead of 0. XNNPACK's preprocessing writes a
``cat`` of more than five tensors as a chain of cats of five at most.

The program grows with the sequence length (fourteen ops a step and layer),
so this is for the fixed window length a program with an LSTM has anyway: its
value is computed by unrolling the sequence, and ``torch.export`` fixes the length.

The pass leaves an LSTM as it is, and does nothing on a program without one, when
its input is not float32, its sequence length or batch size is not fixed (or is
zero), it has projections (``proj_size``), it trains with dropout, or its biases
are not constants.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    is_static,
    tensor_of,
    value,
)

aten = torch.ops.aten

_ZERO_FILLS = frozenset({aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default})


@dataclass(frozen=True)
class _Direction:
    """The parameters of one layer in one direction, as ``aten.lstm.input`` lists them."""

    w_ih: torch.fx.Node
    w_hh: torch.fx.Node
    bias: torch.fx.Node | None
    """``b_ih + b_hh``, a new constant; None without biases."""
    h0: torch.fx.Node | None
    """The initial hidden state ``[1, B, H]`` (``[B, 1, H]`` batch first); None: zeros."""
    c0: torch.fx.Node | None
    reverse: bool
    time_dim: int
    """1 batch first, else 0."""


class LstmAsStepsPass(NodeRewritePass):
    targets = frozenset({aten.lstm.input})

    def rewrite(self, node: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node] | Skip:
        given = arguments(node)
        x, (h0, c0), params = given["input"], given["hx"], list(given["params"])
        x_val, h0_val, c0_val = value(x), value(h0), value(c0)
        if x_val is None or h0_val is None or c0_val is None or x_val.dtype != torch.float32 or x_val.dim() != 3:
            return Skip("its input is not a float32 [T, B, I] tensor")
        if not all(is_static(size) for size in x_val.shape):
            return Skip("its sequence length or batch size is not fixed")
        if x_val.numel() == 0:
            return Skip("it has no steps or no batch")
        if h0_val.shape[2] != c0_val.shape[2]:
            return Skip("it has projections (proj_size)")
        if given["train"] and given["dropout"] > 0:
            return Skip("it trains with dropout")
        if any(user.target is not operator.getitem for user in node.users):
            return Skip("something reads its result tuple other than by index")
        directions = 2 if given["bidirectional"] else 1
        group = 4 if given["has_biases"] else 2
        if given["has_biases"] and not all(p in self.constants for p in params[2::4] + params[3::4]):
            return Skip("its biases are not constants")
        time_dim = 1 if given["batch_first"] else 0

        layer_input, last_h, last_c = x, [], []
        for layer in range(given["num_layers"]):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                weights = params[index * group : (index + 1) * group]
                step = self._direction(node, weights, (h0, c0), index, reverse=direction == 1, time_dim=time_dim)
                y, h, c = self._steps(node, layer_input, step)
                outputs.append(y)
                last_h.append(self._swap_batch_and_time(node, h, time_dim))
                last_c.append(self._swap_batch_and_time(node, c, time_dim))
            layer_input = outputs[0] if directions == 1 else self._cat(node, outputs, -1)

        results = {0: layer_input, 1: self._cat(node, last_h, 0), 2: self._cat(node, last_c, 0)}
        return {user: results[user.args[1]] for user in node.users}

    def _direction(
        self,
        node: torch.fx.Node,
        weights: Sequence[torch.fx.Node],
        initial: tuple[torch.fx.Node, torch.fx.Node],
        index: int,
        *,
        reverse: bool,
        time_dim: int,
    ) -> _Direction:
        bias = None
        if len(weights) == 4:
            b_ih, b_hh = weights[2:]
            # One bias on the GEMM of all steps: a step then adds nothing but its hidden state's GEMM.
            bias = add_constant(
                self.exported_program, self.graph, f"{b_ih.name}_hh", self.constants[b_ih] + self.constants[b_hh]
            )
            self.release_constant(b_ih)
            self.release_constant(b_hh)
        h0, c0 = (self._initial(node, state, index, time_dim) for state in initial)
        return _Direction(weights[0], weights[1], bias, h0, c0, reverse, time_dim)

    def _initial(self, node: torch.fx.Node, state: torch.fx.Node, index: int, time_dim: int) -> torch.fx.Node | None:
        """The initial state of layer and direction ``index`` in the layout of a step's state; None if zeros."""
        if _is_zeros(state, self.constants):
            return None
        layer = insert_op(self.graph, aten.slice.Tensor, (state, 0, index, index + 1), origin=node)
        return self._swap_batch_and_time(node, layer, time_dim)

    def _steps(
        self, node: torch.fx.Node, x: torch.fx.Node, step: _Direction
    ) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]:
        """The layer's output over all steps, and its last hidden and cell state."""
        linear = aten.linear.default
        inputs = insert_op(self.graph, linear, (x, step.w_ih, step.bias), origin=node)
        length = int(tensor_of(x).shape[step.time_dim])
        hidden = int(tensor_of(step.w_hh).shape[1])
        h, c = step.h0, step.c0
        outputs = []
        for t in reversed(range(length)) if step.reverse else range(length):
            gates = insert_op(self.graph, aten.slice.Tensor, (inputs, step.time_dim, t, t + 1), origin=node)
            if h is not None:
                recurrent = insert_op(self.graph, linear, (h, step.w_hh), origin=node)
                gates = insert_op(self.graph, aten.add.Tensor, (recurrent, gates), origin=node)
            # One sigmoid of all four gates (the cell gate's is not read): fewer ops than one per gate.
            sigmoids = insert_op(self.graph, aten.sigmoid.default, (gates,), origin=node)
            i, f, o = (self._gate(node, sigmoids, k, hidden) for k in (0, 1, 3))
            g = insert_op(self.graph, aten.tanh.default, (self._gate(node, gates, 2, hidden),), origin=node)
            c_new = insert_op(self.graph, aten.mul.Tensor, (i, g), origin=node)
            if c is not None:
                kept = insert_op(self.graph, aten.mul.Tensor, (f, c), origin=node)
                c_new = insert_op(self.graph, aten.add.Tensor, (kept, c_new), origin=node)
            c = c_new
            squashed = insert_op(self.graph, aten.tanh.default, (c,), origin=node)
            h = insert_op(self.graph, aten.mul.Tensor, (o, squashed), origin=node)
            outputs.append(h)
        assert h is not None and c is not None  # a tensor of fixed shape has at least one step
        if step.reverse:
            outputs.reverse()
        return self._cat(node, outputs, step.time_dim), h, c

    def _gate(self, node: torch.fx.Node, gates: torch.fx.Node, k: int, hidden: int) -> torch.fx.Node:
        """Gate ``k`` (input, forget, cell, output) of a step's ``[.., 4H]`` gates."""
        return insert_op(self.graph, aten.slice.Tensor, (gates, -1, k * hidden, (k + 1) * hidden), origin=node)

    def _cat(self, node: torch.fx.Node, tensors: list[torch.fx.Node], dim: int) -> torch.fx.Node:
        # XNNPACK declines a cat of one tensor.
        return tensors[0] if len(tensors) == 1 else insert_op(self.graph, aten.cat.default, (tensors, dim), origin=node)

    def _swap_batch_and_time(self, node: torch.fx.Node, state: torch.fx.Node, time_dim: int) -> torch.fx.Node:
        """Batch first, a step's state ``[B, 1, H]`` as an entry of ``h_n`` ``[1, B, H]``, and back; else as it is."""
        if time_dim == 0:
            return state
        return insert_op(self.graph, aten.permute.default, (state, [1, 0, 2]), origin=node)


def _is_zeros(state: torch.fx.Node, constants: dict[torch.fx.Node, torch.Tensor]) -> bool:
    if state in constants:
        return not bool(constants[state].any())
    if state.target is aten.full.default:
        return state.args[1] == 0
    return state.target in _ZERO_FILLS
