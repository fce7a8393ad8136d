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

    after, x is a convolution with constant weights that only such selections read

    x_in ── conv1d(W[i_0, i_1, ...], b[i_0, i_1, ...]) ──          (one per piece; the convolution itself is dropped)

    after, otherwise

    x ── conv1d(E) ──                                             E [n, C, 1]: E[j, i_j] = 1, a constant

and a GLU is then ``a * sigmoid(b)`` of its two halves. The first form computes
exactly what the convolution computed, channel for channel, for no extra work
(VITS's ``conv_post`` split into mean and log-scale). The second multiplies by
zeros and ones: exact for finite values (a non-finite value in one channel
makes its ``0 *`` terms NaN in every picked channel at that sample), at ``C``
multiply-adds per output element, which is small next to the convolutions a
signal of ``C`` channels goes through, and what a delegate boundary costs to
avoid. A flip of a flip's output, a split of a flip's, and so on, are the first
form again: each 1x1 convolution this pass writes has constant weights.

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
            weight = self._constant(f"{x.name}_weight", self._value(given["weight"])[rows])
            self.release_constant(given["weight"])
            bias = None
            if given["bias"] is not None:
                bias = self._constant(f"{x.name}_bias", self._value(given["bias"])[rows])
                self.release_constant(given["bias"])
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
        if given["groups"] != 1 or given["weight"] not in self._constants_and_written:
            return None
        if given["bias"] is not None and given["bias"] not in self._constants_and_written:
            return None
        # A selection left as it is, or written as slices, would still read x: cutting x would compute it twice.
        if not all(_becomes_convolutions(user) for user in x.users):
            return None
        return x

    @property
    def _constants_and_written(self) -> dict[torch.fx.Node, torch.Tensor]:
        return self.constants | self._written

    def _value(self, constant: torch.fx.Node) -> torch.Tensor:
        return self._constants_and_written[constant]

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


def _is_static_tensor(node: object) -> bool:
    val = value(node) if isinstance(node, torch.fx.Node) else None
    return val is not None and all(is_static(size) for size in val.shape)


def _channels(node: torch.fx.Node) -> int:
    val = value(node)
    assert val is not None
    return int(val.shape[1])
