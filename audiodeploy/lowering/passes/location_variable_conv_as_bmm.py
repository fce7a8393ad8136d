"""Write a location-variable convolution (UnivNet, LVCNet) as tap gathers, per-gate kernel convolutions and ``bmm``.

A location-variable convolution (LVC) convolves each hop-long segment ``l`` of
its input with its own kernel ``K[:, :, :, :, l]``, which a kernel predictor (a
``conv1d`` over the mel frames) computes. transformers' ``UnivNetModel`` (after
maum-ai/univnet and LVCNet) writes it with ``unfold``, a 6-D ``einsum`` and a
bias, reads each layer's kernels with ``select`` and splits the result into the
two halves of its gated activation with ``slice``. ExecuTorch 1.5.1's XNNPACK
partitioner has no ``unfold``, decomposes the ``einsum`` into 5- to 7-D
permutes, clones and views it declines, and declines a ``select`` or ``slice``
of a tensor with a dynamic size: every LVC cuts the delegates (UnivNet-c32: 51).

For each part of the output that one channel slice reads (each gate), the pass
gathers the ``k`` taps of every output step with one-hot depthwise
convolutions, computes that part's kernels and biases with 1x1 convolutions
that take only their rows of the kernel predictor's weights, and multiplies
segment by segment in one ``bmm`` whose batch is the segments::

    before      i input channels, o = 2c outputs, k taps, dilation d, padding p, L segments of hop steps, T = L * hop

    h ── conv1d(Wk) ── view [1, n, i, o, k, L] ── select(1, j) ───────────────────┐
    x [1, i, T] ── pad(p) ── unfold ── unfold ── transpose ── unfold ──────────────┴─ einsum("bildsk,biokl->bolsd")
    h ── conv1d(Wb) ── view [1, n, o, L] ── select(1, j) ── unsqueeze ── unsqueeze ── add ─┘
        ── view [1, o, T] ─┬─ slice(1, 0, c) ── sigmoid ──
                           └─ slice(1, c, o) ── tanh ─────

    after (taps once per LVC and per predictor input; the rest once per slice [c0, c1), c = c1 - c0)

    x [1, i, T] ── unsqueeze(2) ── taps ── [1, k*i, 1, T] ── permute(0, 2, 3, 1) ── view [L, hop, k*i] ─┐
    h [1, C, L] ── unsqueeze(2) ── taps ─┬─ conv2d(1x1, rows of Wk: layer j, outputs c0..c1)             │
                                         │      ── permute(0, 2, 3, 1) ── view [L, k*i, c] ─────────────┴─ bmm ─┐
                                         └─ conv2d(1x1, rows of Wb: layer j, outputs c0..c1)                    │
                                                ── permute(0, 2, 3, 1) ── view [L, 1, c] ──────────────── add ──┘
        ── view [1, T, c] ── permute(0, 2, 1) ── [1, c, T] ── sigmoid / tanh ──

    taps of [1, C, 1, T]: conv2d(E_t [C, 1, 1, k], padding (0, p), dilation (1, d), groups C) for each tap t,
    then cat(1), so that channel t * C + c holds tap t of channel c

``E_t`` holds a one in tap ``t``: the ``t``-th gather is the input padded by
``p`` and shifted by ``t * d``, the values the unfolds select (the predictor's
taps use the predictor's own padding and dilation). The bmm puts the segment's
steps in its rows (``hop`` of them) and the gate's channels in its columns:
XNNPACK's batched GEMM packs its right operand on every call, and this one
(``k*i x c``) is the smaller; the other way round took twice as long. The taps
run on ``[1, C, 1, T]`` images, which XNNPACK keeps channels-last: that is the
segment-major order the permutes ask for, so they copy values without
transposing them. The predictor's input is short (one step per segment) and its
output wide: gathering its taps once lets each part run as XNNPACK's plain GEMM
instead of its indirect GEMM (UnivNet-c32 at 1 s: 20 ms instead of 25).

The parts' convolutions together compute the rows the predictor did: the program
does the same work and stores the same weights. Each part's rows are taken from
the weight's sources, so that :mod:`fold_computed_gemm_weights` folds them: a
constant weight gives a constant of its rows; ``_weight_norm(v, g, 0)`` (weight
norm, which normalizes each output row on its own, whatever the order of its
entries) gives ``_weight_norm(v[rows], g[rows], 0)``. An LVC whose output is not
read through channel slices is rewritten the same way, as one part holding
every channel. Every reshape has one size that depends on the length (``L``),
so dynamic lengths keep working. The result equals the ``einsum``'s for finite
inputs (an infinite input makes its window NaN, ``0 * inf``, in the one-hot
gathers).

The pass does nothing on a program without an ``einsum`` of that equation (up
to renaming its letters) whose first operand is those unfolds of a zero-padded
3-D input with ``p = d * (k - 1) / 2`` and ``hop`` a multiple of ``d``, with a
static batch size, read through a view to ``[b, o, T]`` (after the bias, and
memory-format copies, if any). It leaves such an LVC as it is unless its kernel,
and its bias if it has one, are channels of a float32 ``conv1d`` without groups
(directly, through a view, or a ``select`` of one) whose weight is a constant or
the weight norm of constants along dimension 0, whose bias is a constant or
absent, and whose output only the LVCs' views and selects read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    constant_padding,
    conv1d_geometry,
    gather_taps,
    insert_op,
    insert_reshape,
    tensor_of,
    value,
)

aten = torch.ops.aten

_EQUATION = "bildsk,biokl->bolsd"
"""transformers' ``UnivNetLvcResidualBlock.location_variable_convolution`` (maum-ai/univnet's ``lvcnet.py``)."""

_VIEW_OPS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default}
_PASS_THROUGH = {aten.alias.default, aten.clone.default}
"""Ops that give their input's values in its shape (the memory format aside)."""


@dataclass(frozen=True)
class _PredictedChannels:
    """A tensor ``[b, *dims, L]`` that is channels ``offset .. offset + prod(dims)`` of a kernel predictor's conv1d."""

    conv: torch.fx.Node
    offset: int


@dataclass(frozen=True)
class _Lvc:
    """One location-variable convolution: input, tap geometry, where its kernels and biases come from."""

    einsum: torch.fx.Node
    x: torch.fx.Node
    batch: int
    in_channels: int
    out_channels: int
    taps: int
    dilation: int
    padding: int
    hop: int
    kernel: _PredictedChannels
    bias: _PredictedChannels | None


class LocationVariableConvAsBmmPass(NodeRewritePass):
    """Replace each gate slice (or the whole output) of an LVC by gathers, per-part predictor convolutions and a bmm."""

    targets = frozenset({aten.slice.Tensor, *_VIEW_OPS})

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        self._columns_of: dict[torch.fx.Node, torch.fx.Node] = {}  # einsum -> its input's taps, [b * L, hop, k * i]
        # (predictor input, taps, stride, padding, dilation) -> its taps, [b, k * C, 1, L]
        self._taps_of: dict[tuple[torch.fx.Node, int, int, int, int], torch.fx.Node] = {}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if node.target == aten.slice.Tensor:
            lvc = self._match(node.args[0])
            if isinstance(lvc, Skip):
                return Skip(f"does not slice a location-variable convolution ({lvc.reason})")
            channels = _channel_range(node, lvc.out_channels)
            if channels is None:
                return Skip("not a slice of the output channels with step 1 and fixed bounds")
            return self._part(lvc, *channels, origin=node)
        lvc = self._match(node)
        if isinstance(lvc, Skip):
            return lvc
        if all(_channel_range(user, lvc.out_channels) is not None for user in node.users):
            return Skip("read through channel slices: each is rewritten on its own")
        return self._part(lvc, 0, lvc.out_channels, origin=node)

    # Matching

    def _match(self, output: torch.fx.Node) -> _Lvc | Skip:
        """The LVC whose ``[b, o, T]`` output is ``output`` (a view of ``einsum + bias``)."""
        if not isinstance(output, torch.fx.Node) or output.target not in _VIEW_OPS:
            return Skip("not a view")
        out = value(output)
        einsum, bias = _einsum_and_bias(output.args[0])
        if einsum is None or out is None or out.dim() != 3:
            return Skip("not a 3-D view of an einsum plus a bias")
        equation = einsum.args[0]
        if _canonical(equation) != _canonical(_EQUATION):
            return Skip(f"einsum {equation!r} is not {_EQUATION!r}")
        columns, kernel = einsum.args[1]
        geometry = _tap_geometry(columns)
        if isinstance(geometry, Skip):
            return geometry
        x, taps, dilation, padding, hop = geometry
        x_val, k_val = tensor_of(x), value(kernel)
        batch, in_channels, _ = x_val.shape
        if not isinstance(batch, int):
            return Skip("the batch size is dynamic")
        if x_val.dtype != torch.float32 or k_val is None or k_val.dtype != torch.float32:
            return Skip("not float32")
        out_channels = k_val.shape[2]
        if tuple(k_val.shape[:4]) != (batch, in_channels, out_channels, taps) or tuple(out.shape[:2]) != (
            batch,
            out_channels,
        ):
            return Skip(f"kernel shape {tuple(k_val.shape)} does not fit the input {tuple(x_val.shape)}")
        kernel_source = self._predicted(kernel, (in_channels, out_channels, taps))
        if isinstance(kernel_source, Skip):
            return Skip(f"kernel: {kernel_source.reason}")
        bias_source: _PredictedChannels | None = None
        if bias is not None:
            predicted = self._predicted(bias, (out_channels,))
            if isinstance(predicted, Skip):
                return Skip(f"bias: {predicted.reason}")
            bias_source = predicted
        return _Lvc(
            einsum, x, batch, in_channels, out_channels, taps, dilation, padding, hop, kernel_source, bias_source
        )

    def _predicted(self, node: torch.fx.Node, dims: tuple[int, ...]) -> _PredictedChannels | Skip:
        """Where ``node`` ``[b, *dims, L]`` comes from: ``conv1d``, ``view(conv1d)`` or ``select(view(conv1d), 1, j)``."""
        if value(node) is None or tuple(tensor_of(node).shape[1:-1]) != dims:
            return Skip(f"not of shape [b, {', '.join(map(str, dims))}, L]")
        piece, offset = tensor_of(node), 0
        if node.target == aten.select.int:
            selected = arguments(node)
            layers = tensor_of(selected["input"]).shape[1]
            if selected["dim"] % tensor_of(selected["input"]).dim() != 1 or not isinstance(layers, int):
                return Skip("selected along another dimension than 1")
            offset = selected["index"] % layers * math.prod(dims)
            node = selected["input"]
        if node.target in _VIEW_OPS:
            node = node.args[0]
        conv = node
        if (
            conv.target != aten.conv1d.default
            or tensor_of(conv).dtype != torch.float32
            or arguments(conv)["groups"] != 1
        ):
            return Skip("not the channels of a float32 conv1d without groups")
        if tensor_of(conv).shape[-1] != piece.shape[-1] or tensor_of(conv).shape[0] != piece.shape[0]:
            return Skip("the view does not only split the predictor's channels")
        views = [user for user in conv.users if user.target in _VIEW_OPS]
        readers = [
            reader for reader in (*conv.users, *(r for view in views for r in view.users)) if reader not in views
        ]
        if not all(
            reader.target in (aten.select.int, aten.einsum.default, aten.unsqueeze.default) for reader in readers
        ):
            return Skip("the predictor's output is read by other ops than the LVCs' views and selects")
        reason = self._splittable(conv)
        if reason is not None:
            return Skip(reason)
        return _PredictedChannels(conv, offset)

    def _splittable(self, conv: torch.fx.Node) -> str | None:
        """Why the rows of ``conv``'s weight and bias cannot be taken from their sources, or None."""
        given = arguments(conv)
        weight, bias = given["weight"], given["bias"]
        if not all(isinstance(entry, int) for entry in conv1d_geometry(conv)):
            return "the predictor's stride, padding or dilation is not one number"
        if bias is not None and bias not in self.constants:
            return "the predictor's bias is computed"
        if weight in self.constants:
            return None
        if weight.target == aten._weight_norm.default:
            norm = arguments(weight)
            if norm["dim"] == 0 and norm["v"] in self.constants and norm["g"] in self.constants:
                return None
        return "the predictor's weight is neither a constant nor the weight norm of constants along dimension 0"

    # Building

    def _part(self, lvc: _Lvc, first: int, end: int, *, origin: torch.fx.Node) -> torch.fx.Node:
        """Output channels ``first .. end`` of ``lvc``, bias included: ``[b, end - first, T]``."""
        graph, b, i, o, k = self.graph, lvc.batch, lvc.in_channels, lvc.out_channels, lvc.taps
        channels = end - first
        columns = self._columns(lvc, origin)  # [b * L, hop, k * i]
        # K[.., ii, oo, t, l] is channel (ii * o + oo) * k + t of its predictor part; the bmm wants (t, ii, oo).
        rows = [(ii * o + oo) * k + t for t in range(k) for ii in range(i) for oo in range(first, end)]
        kernels = self._predicted_part(lvc.kernel, rows, [k * i, channels], origin)
        product = insert_op(graph, aten.bmm.default, (columns, kernels), origin=origin)  # [b * L, hop, c]
        if lvc.bias is not None:
            biases = self._predicted_part(lvc.bias, list(range(first, end)), [1, channels], origin)
            product = insert_op(graph, aten.add.Tensor, (product, biases), origin=origin)
        product = insert_reshape(graph, product, [b, -1, channels], origin=origin)  # [b, T, c]
        return insert_op(graph, aten.permute.default, (product, [0, 2, 1]), origin=origin)

    def _columns(self, lvc: _Lvc, origin: torch.fx.Node) -> torch.fx.Node:
        """``[b * L, hop, k * i]``: column ``t * i + ii`` of step ``s`` in segment ``l`` holds tap ``t`` of channel ``ii``.

        Built once per LVC, for all its parts.
        """
        if lvc.einsum not in self._columns_of:
            graph = self.graph
            image = insert_op(graph, aten.unsqueeze.default, (lvc.x, 2), origin=origin)
            taps = gather_taps(
                self.exported_program, self.graph, image, lvc.taps, 1, lvc.padding, lvc.dilation,
                f"{lvc.einsum.name}_tap", origin=origin,
            )  # fmt: skip
            taps = insert_op(graph, aten.permute.default, (taps, [0, 2, 3, 1]), origin=origin)  # [b, 1, T, k * i]
            columns = [-1, lvc.hop, lvc.taps * lvc.in_channels]
            self._columns_of[lvc.einsum] = insert_reshape(graph, taps, columns, origin=origin)
        return self._columns_of[lvc.einsum]

    def _predicted_part(
        self, source: _PredictedChannels, rows: list[int], shape: list[int], origin: torch.fx.Node
    ) -> torch.fx.Node:
        """``[b * L, *shape]``: channels ``rows`` of ``source``, computed with those rows of the predictor's weight.

        The predictor's input is short (one step per segment) and its output wide: its taps are gathered
        once, and each part is a 1x1 convolution on them, which XNNPACK runs as its plain GEMM.
        """
        ep, graph, conv = self.exported_program, self.graph, source.conv
        given = arguments(conv)
        weight, bias = given["weight"], given["bias"]
        taps = tensor_of(weight).shape[-1]
        index = torch.tensor([source.offset + row for row in rows])

        def gemm_rows(data: torch.Tensor) -> torch.Tensor:  # [N, C, k] -> [N, k * C, 1, 1], taps outermost
            return data[index].permute(0, 2, 1).reshape(len(rows), -1, 1, 1)

        if weight in self.constants:
            weight_rows = add_constant(ep, graph, f"{weight.name}_rows", gemm_rows(self.constants[weight]))
        else:  # _weight_norm(v, g, 0): each row is normalized on its own, whatever the order of its entries
            v, g = weight.args[:2]
            v_rows = add_constant(ep, graph, f"{v.name}_rows", gemm_rows(self.constants[v]))
            g_rows = add_constant(ep, graph, f"{g.name}_rows", self.constants[g][index].reshape(len(rows), 1, 1, 1))
            weight_rows = insert_op(graph, aten._weight_norm.default, (v_rows, g_rows, 0), origin=conv)
        bias_rows = None if bias is None else add_constant(ep, graph, f"{bias.name}_rows", self.constants[bias][index])
        # The predictor convolutions' weights now live in their row subsets: the originals are released.
        for source in (weight, *weight.args[:2], bias):
            if source in self.constants:
                self.release_constant(source)
        stride, padding, dilation, _ = conv1d_geometry(conv)
        key = (conv.args[0], taps, stride, padding, dilation)  # the kernel and bias predictors share their input
        if key not in self._taps_of:
            image = insert_op(graph, aten.unsqueeze.default, (conv.args[0], 2), origin=conv)
            self._taps_of[key] = gather_taps(
                self.exported_program, self.graph, image, taps, stride, padding, dilation, f"{conv.name}_tap",
                origin=conv,
            )  # fmt: skip
        part = insert_op(graph, aten.conv2d.default, (self._taps_of[key], weight_rows, bias_rows), origin=conv)
        part = insert_op(graph, aten.permute.default, (part, [0, 2, 3, 1]), origin=origin)  # [b, 1, L, rows]
        return insert_reshape(graph, part, [-1, *shape], origin=origin)


def _channel_range(node: torch.fx.Node, channels: int) -> tuple[int, int] | None:
    """``(start, end)`` when ``node`` slices dimension 1 of a 3-D tensor with step 1 and fixed bounds."""
    if node.target != aten.slice.Tensor:
        return None
    given = arguments(node)
    if given["dim"] not in (1, -2) or given["step"] != 1:
        return None
    start, end = given["start"], given["end"]
    start = 0 if start is None else start
    end = channels if end is None else end
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    start, end = (max(0, min(channels, s + channels if s < 0 else s)) for s in (start, end))
    return (start, end) if start < end else None


def _einsum_and_bias(node: torch.fx.Node) -> tuple[torch.fx.Node | None, torch.fx.Node | None]:
    """``(einsum, bias [b, o, L])`` of ``einsum`` or ``einsum + unsqueeze(unsqueeze(bias, -1), -1)``."""
    node = _through(node)
    if not isinstance(node, torch.fx.Node):
        return None, None
    if node.target == aten.einsum.default:
        return node, None
    if node.target != aten.add.Tensor or arguments(node)["alpha"] != 1:
        return None, None
    for einsum, bias in (node.args[:2], node.args[1::-1]):
        einsum = _through(einsum)
        if not isinstance(einsum, torch.fx.Node) or einsum.target != aten.einsum.default:
            continue
        for _ in range(2):
            bias = _through(bias)
            if not isinstance(bias, torch.fx.Node) or bias.target != aten.unsqueeze.default:
                return None, None
            if arguments(bias)["dim"] not in (-1, tensor_of(bias).dim() - 1):
                return None, None
            bias = bias.args[0]
        return einsum, bias
    return None, None


def _canonical(equation: str) -> str:
    """The equation with its letters renamed in order of appearance: equal for equivalent equations."""
    names: dict[str, str] = {}
    return "".join(
        names.setdefault(c, chr(ord("a") + len(names))) if c.isalpha() else c for c in equation.replace(" ", "")
    )


def _through(node: torch.fx.Node) -> torch.fx.Node:
    """``node`` before the ops that keep its values and shape: alias, clone and memory-format copies, full slices."""
    while isinstance(node, torch.fx.Node):
        if node.target in _PASS_THROUGH or (node.target == aten._to_copy.default and _same_kind(node, node.args[0])):
            node = node.args[0]
        elif node.target == aten.slice.Tensor and _same_shape(node, node.args[0]):
            node = node.args[0]
        else:
            break
    return node


def _same_shape(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    out, into = value(node), value(source)
    return out is not None and into is not None and list(out.shape) == list(into.shape)


def _same_kind(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    """Whether ``node`` holds its values with ``source``'s dtype and device."""
    out, into = value(node), value(source)
    return out is not None and into is not None and (out.dtype, out.device) == (into.dtype, into.device)


def _unfold(node: torch.fx.Node, dim: int) -> tuple[torch.fx.Node, int, int] | None:
    """``(input, size, step)`` of ``unfold(input, dim, size, step)``, else None."""
    node = _through(node)
    if not isinstance(node, torch.fx.Node) or node.target != aten.unfold.default:
        return None
    source, unfolded_dim, size, step = node.args[:4]
    if unfolded_dim % tensor_of(source).dim() != dim:
        return None
    return source, size, step


def _tap_geometry(columns: torch.fx.Node) -> tuple[torch.fx.Node, int, int, int, int] | Skip:
    """``(x, taps, dilation, padding, hop)`` of transformers' unfolds of the padded LVC input.

    ``unfold(transpose(unfold(unfold(pad(x, p), 2, hop + 2p, hop), 3, d, d), 3, 4), 4, k, 1)`` holds at
    ``[b, i, l, e, s, t]`` the padded input at ``l * hop + s * d + e + t * d``: for ``p = d (k - 1) / 2``
    and ``hop`` a multiple of ``d``, tap ``t`` of output step ``l * hop + s * d + e`` of a convolution
    with dilation ``d`` and padding ``p``.
    """
    taps_of = _unfold(columns, 4)
    if taps_of is None or taps_of[2] != 1:
        return Skip("the einsum's first operand is not an unfold of k taps with step 1")
    transposed, taps, _ = taps_of
    transposed = _through(transposed)
    if transposed.target != aten.transpose.int or sorted(d % 5 for d in transposed.args[1:3]) != [3, 4]:
        return Skip("the taps are not unfolded from a transpose of the last two dimensions")
    phases = _unfold(transposed.args[0], 3)
    if phases is None or phases[1] != phases[2]:
        return Skip("not unfolded by the dilation")
    segments_of, dilation, _ = phases
    segments = _unfold(segments_of, 2)
    if segments is None:
        return Skip("the segments are not an unfold of the padded input")
    padded, window, hop = segments
    padded = _through(padded)
    pad = _constant_pad(padded)
    if pad is None:
        return Skip("the segments are not unfolded from a constant zero pad of a 3-D input")
    x, padding = pad
    if window != hop + 2 * padding or 2 * padding != dilation * (taps - 1) or hop % dilation != 0:
        return Skip(
            f"window {window}, hop {hop}, padding {padding}, dilation {dilation}, {taps} taps: not a centred convolution"
        )
    return x, taps, dilation, padding, hop


def _constant_pad(node: torch.fx.Node) -> tuple[torch.fx.Node, int] | None:
    """``(x, p)`` when ``node`` pads the last dimension of a 3-D float ``x`` by ``p`` zeros on each side."""
    padding = constant_padding(node)
    if padding is None:
        return None
    x, sizes, fill = padding
    if fill != 0 or value(x) is None or tensor_of(x).dim() != 3 or len(sizes) != 2 or sizes[0] != sizes[1]:
        return None
    return x, sizes[0]
