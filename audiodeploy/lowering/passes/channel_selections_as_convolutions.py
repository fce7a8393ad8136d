"""Write a flip, split, slice or GLU along the channels of a signal as 1x1 convolutions, which XNNPACK delegates.

Audio models pick channels of ``[N, C, T]`` signals: VITS's flow flips the
channels between coupling layers and splits them into halves; gated units
(``F.glu``, or ``a, b = x.chunk(2, 1)`` and ``a * sigmoid(b)``) split a
convolution's output. At a dynamic length ExecuTorch 1.5.1's XNNPACK
partitioner takes none of these: it has no config for ``flip`` or
``split_with_sizes`` (``split`` and ``chunk`` lower to it), and declines a
``slice_copy`` (what edge lowering makes of a slice and of ``glu``) whose input
has a symbolic size, along whichever dimension it slices. Each cuts the
delegate. Picking channels ``i_0, i_1, ...`` is a 1x1 convolution, in one of two
forms::

    before

    x [N, C, T] ── split([h, C - h], 1) ── getitem(k) ──          (or flip([1]), x[:, a:b], glu(1))

    after, x is a convolution with constant or weight-normed weights that only such selections read

    x_in ── conv1d(W[i_0, i_1, ...], b[i_0, i_1, ...]) ──          (one per piece; the convolution itself is dropped)

    after, otherwise

    x ── conv1d(E) ──                                             E [n, C, 1]: E[j, i_j] = 1, a constant

and a GLU is then ``a * sigmoid(b)`` of its two halves. The first form computes
exactly what the convolution computed, channel for channel, for no extra work
(VITS's ``conv_post`` split into mean and log-scale, its WaveNet's gate halves,
residual and skip halves). A weight norm along dim 0 (``weight_norm``'s default,
as on VITS's WaveNet convolutions) normalizes each output channel apart, so rows
of ``_weight_norm(v, g, 0)`` are ``_weight_norm(v[rows], g[rows], 0)``, bit for
bit: each piece gets its own, which the fold folds and reports as any other.
The second multiplies by zeros and ones: exact for finite values (a non-finite
value in one channel makes its ``0 *`` terms NaN in every picked channel at that
sample), at ``C`` multiply-adds per output element, which is small next to the
convolutions a signal of ``C`` channels goes through, and what a delegate
boundary costs to avoid. A flip of a flip's output, a split of a flip's, and so
on, are the first form again: each 1x1 convolution this pass writes has constant
weights.

A flip of dimensions of one entry only (the channels of a mono signal, a batch
of one) returns its input, whatever the tensor: it is dropped.

A split of a tensor whose sizes are all fixed (a program exported for one
length) becomes slices instead, along any dimension: XNNPACK slices a static
tensor, so a static slice or GLU is left as it is.

The pass leaves a selection as it is, and does nothing on a program without
one, when it picks along another dimension than dim 1 of a 3-D float32 tensor
of a dynamic shape (a split along the last dimension is :mod:`split_as_linears`'s;
4-D tensors are left to the passes that rewrite attention heads, which take
their slices whole), the number of channels or a slice's bounds depend on the
input length, or it is a flip of more than the channels.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

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


@dataclass(frozen=True)
class _Selection:
    """What a flip, split, slice or GLU along the channels picks: each piece's channels, in order."""

    x: torch.fx.Node
    pieces: tuple[tuple[int, ...], ...]


class ChannelSelectionsAsConvolutionsPass(NodeRewritePass):
    targets = frozenset(
        {aten.flip.default, aten.split.Tensor, aten.split_with_sizes.default, aten.slice.Tensor, aten.glu.default}
    )

    def __init__(self, exported_program: torch.export.ExportedProgram) -> None:
        super().__init__(exported_program)
        self._written: dict[torch.fx.Node, torch.Tensor] = {}
        """The constants this pass wrote (its convolutions' weights and biases), with their values."""

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | dict[torch.fx.Node, torch.fx.Node] | Skip:
        if node.target == aten.flip.default and _flips_nothing(node):
            return arguments(node)["input"]
        if node.target in (aten.split.Tensor, aten.split_with_sizes.default) and _is_static_tensor(node.args[0]):
            return _split_as_slices(self.graph, node)
        selection = _selection(node)
        if isinstance(selection, Skip):
            return selection
        if _is_static_tensor(selection.x) and node.target in (aten.slice.Tensor, aten.glu.default):
            return Skip("the tensor's shape is static: XNNPACK slices it")
        if node.target in (aten.split.Tensor, aten.split_with_sizes.default):
            # Only the pieces read: a convolution left unread would leave its weight in the program.
            return {user: self._pick(selection.x, selection.pieces[user.args[1]], origin=node) for user in node.users}
        pieces = [self._pick(selection.x, channels, origin=node) for channels in selection.pieces]
        if node.target == aten.glu.default:
            gate = insert_op(self.graph, aten.sigmoid.default, (pieces[1],), origin=node)
            return insert_op(self.graph, aten.mul.Tensor, (pieces[0], gate), origin=node)
        return pieces[0]

    def _pick(self, x: torch.fx.Node, channels: tuple[int, ...], *, origin: torch.fx.Node) -> torch.fx.Node:
        """Channels ``channels`` of ``x``, by a convolution: ``x``'s own, cut to them, or a selection."""
        if channels == tuple(range(_channels(x))):
            return x
        conv = self._cuttable_convolution(x)
        if conv is not None:
            given = arguments(conv)
            rows = list(channels)
            weight = self._rows(given["weight"], rows, f"{x.name}_weight", origin=conv)
            bias = None if given["bias"] is None else self._rows(given["bias"], rows, f"{x.name}_bias", origin=conv)
            args = (given["input"], weight, bias, given["stride"], given["padding"], given["dilation"], 1)
            return insert_op(self.graph, conv.target, args, origin=conv)
        one_hot = torch.zeros(len(channels), _channels(x), 1)
        for row, channel in enumerate(channels):
            one_hot[row, channel] = 1.0
        selector = self._constant("channel_selection", one_hot)
        return insert_op(self.graph, aten.conv1d.default, (x, selector), origin=origin)

    def _cuttable_convolution(self, x: torch.fx.Node) -> torch.fx.Node | None:
        """``x`` when it is a convolution of constant weights (and bias), one group, that only selections along its
        channels read, each to become a convolution: then each can compute its channels itself."""
        if x.op != "call_function" or x.target != aten.conv1d.default:
            return None
        given = arguments(x)
        if given["groups"] != 1 or not self._has_rows(given["weight"]):
            return None
        if given["bias"] is not None and not self._has_rows(given["bias"]):
            return None
        # A selection left as it is, or written as slices, would still read x: cutting x would compute it twice.
        if not all(_becomes_convolutions(user) for user in x.users):
            return None
        return x

    @property
    def _constants_and_written(self) -> dict[torch.fx.Node, torch.Tensor]:
        return self.constants | self._written

    def _has_rows(self, tensor: torch.fx.Node) -> bool:
        """Whether :meth:`_rows` can pick rows of ``tensor``, a convolution's weight or bias read by it alone."""
        if tensor in self._constants_and_written:
            return True
        norm = _weight_norm_of(tensor)
        return norm is not None and all(part in self._constants_and_written for part in norm)

    def _rows(self, tensor: torch.fx.Node, rows: list[int], name: str, *, origin: torch.fx.Node) -> torch.fx.Node:
        """Rows ``rows`` of ``tensor``: a constant's, stored; a weight norm's, the weight norm of its direction's
        and magnitude's rows (left for the fold to fold and report)."""
        norm = _weight_norm_of(tensor)
        if norm is None:
            self.release_constant(tensor)
            return self._constant(name, self._constants_and_written[tensor][rows])
        direction, magnitude = (self._rows(part, rows, f"{part.name}_rows", origin=origin) for part in norm)
        return insert_op(self.graph, aten._weight_norm.default, (direction, magnitude, 0), origin=origin)

    def _constant(self, name: str, data: torch.Tensor) -> torch.fx.Node:
        node = add_constant(self.exported_program, self.graph, name, data)
        self._written[node] = data
        return node


def _selection(node: torch.fx.Node) -> _Selection | Skip:
    """The channels ``node`` picks from a 3-D float32 tensor, or why it is not such a selection."""
    if node.op != "call_function" or node.target not in ChannelSelectionsAsConvolutionsPass.targets:
        return Skip("not a flip, split, slice or GLU")
    given = arguments(node)
    x = given["input"]
    val = value(x)
    if val is None or val.dtype != torch.float32 or val.dim() != 3:
        return Skip("not a float32 tensor of 3 dimensions")
    rank = val.dim()
    if node.target == aten.flip.default:
        dims = sorted({d % rank for d in given["dims"]})
        if not all(is_static(val.shape[d]) for d in dims):
            return Skip("it flips a dimension whose size depends on the input length")
        if [d for d in dims if val.shape[d] != 1] != [1]:
            return Skip("it flips another dimension than the channels (dim 1)")
    elif given["dim"] % rank != 1:
        return Skip("it picks along another dimension than the channels (dim 1)")
    if not is_static(val.shape[1]):
        return Skip("the number of channels depends on the input length")
    channels = int(val.shape[1])
    if node.target == aten.flip.default:
        return _Selection(x, (tuple(reversed(range(channels))),))
    if node.target == aten.glu.default:
        if channels % 2:
            return Skip(f"a GLU of an odd number of channels ({channels})")
        half = channels // 2
        return _Selection(x, (tuple(range(half)), tuple(range(half, channels))))
    if node.target == aten.slice.Tensor:
        bounds = (given["start"], given["end"], given["step"])
        if not all(b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds):
            return Skip("its bounds depend on the input length")
        picked = tuple(range(channels)[slice(*bounds)])
        return _Selection(x, (picked,)) if picked else Skip("it picks no channel")
    if not all(user.target is operator.getitem for user in node.users):
        return Skip("its pieces are read other than one by one")
    sizes = [int(piece.shape[1]) for piece in node.meta["val"]]
    offsets = [sum(sizes[:index]) for index in range(len(sizes))]
    return _Selection(x, tuple(tuple(range(start, start + size)) for start, size in zip(offsets, sizes)))


def _becomes_convolutions(node: torch.fx.Node) -> bool:
    """Whether the pass writes ``node`` as convolutions: a selection along the channels, not one of a static tensor
    that is left as it is or written as slices (a flip of a static tensor has no other form)."""
    selection = _selection(node)
    return not isinstance(selection, Skip) and (node.target == aten.flip.default or not _is_static_tensor(selection.x))


def _split_as_slices(graph: torch.fx.Graph, node: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node] | Skip:
    """The pieces of a split of a static tensor, each a slice."""
    given = arguments(node)
    x = given["input"]
    val = value(x)
    if val is None or val.dtype != torch.float32:
        return Skip("not a float32 tensor")
    if not all(user.target is operator.getitem for user in node.users):
        return Skip("its pieces are read other than one by one")
    dim = given["dim"] % val.dim()
    sizes = [int(piece.shape[dim]) for piece in node.meta["val"]]
    replacements = {}
    for user in node.users:
        index = user.args[1]
        start = sum(sizes[:index])
        replacements[user] = insert_op(graph, aten.slice.Tensor, (x, dim, start, start + sizes[index]), origin=node)
    return replacements


def _weight_norm_of(tensor: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(v, g)`` of ``tensor = _weight_norm(v, g, 0)`` read by one node only (its convolution); else None.

    Along dim 0 each row is normalized apart: rows of the weight norm are the weight norm of the rows.
    """
    if tensor.op != "call_function" or tensor.target != aten._weight_norm.default or len(tensor.users) != 1:
        return None
    given = arguments(tensor)
    direction, magnitude = given["v"], given["g"]
    if given["dim"] != 0 or not isinstance(direction, torch.fx.Node) or not isinstance(magnitude, torch.fx.Node):
        return None
    return direction, magnitude


def _flips_nothing(flip: torch.fx.Node) -> bool:
    """Whether every dimension ``flip`` reverses has one entry, at every length: it returns its input."""
    given = arguments(flip)
    val = value(given["input"])
    return val is not None and all(is_static(val.shape[d]) and val.shape[d] == 1 for d in given["dims"])


def _is_static_tensor(node: object) -> bool:
    val = value(node) if isinstance(node, torch.fx.Node) else None
    return val is not None and all(is_static(size) for size in val.shape)


def _channels(node: torch.fx.Node) -> int:
    val = value(node)
    assert val is not None
    return int(val.shape[1])
