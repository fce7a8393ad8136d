"""Drop a convolution's last outputs by padding less on the right instead of slicing them off.

wav2vec2's positional convolution has an even kernel (128) and pads 64 on both
sides, so it produces one frame too many, which the model slices off. With a
dynamic input length that ``slice_copy`` cuts the delegate: ExecuTorch 1.5.1's
XNNPACK partitioner declines a slice whose input or output size is symbolic.
SEW's positional convolution does the same with stride 2. For a convolution with
stride ``s``, dropping its last ``k`` outputs is the same as padding ``k s`` fewer
inputs on the right (output ``i`` reads inputs from ``i s - p`` on, and the count of
outputs is the floor of the padded length over ``s``, less a constant), and a
constant pad is delegated::

    before                                     after

    x ── conv1d(stride s, padding p) ──        x ── constant_pad_nd([p, p - k s]) ── conv1d(stride s, padding 0) ──
         slice(-1, 0, -k) ──

The pass leaves a slice as it is, and does nothing on a program without this
pattern, unless it slices the last dimension of a 1-D convolution that has no
other user, from the start with step 1 to ``-k``, and the convolution pads
``p >= k s`` on each side.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, arguments, conv1d_geometry, insert_op, value

aten = torch.ops.aten


class ConvTailSliceAsPaddingPass(NodeRewritePass):
    targets = frozenset({aten.slice.Tensor})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        dropped = _dropped_tail(node)
        if dropped is None:
            return Skip("not a slice of the last dimension from its start to -k")
        conv = node.args[0]
        geometry = _stride_and_padding(conv)
        if geometry is None:
            return Skip("it does not slice a conv1d with numeric stride and padding that only it reads")
        stride, padding = geometry
        if padding < dropped * stride:
            return Skip(f"it drops {dropped} outputs of stride {stride}, more than the padding of {padding} holds")
        given = arguments(conv)
        pads = [padding, padding - dropped * stride]
        padded = insert_op(self.graph, aten.constant_pad_nd.default, (given["input"], pads, 0.0), origin=conv)
        args = (padded, given["weight"], given["bias"], [stride], [0], given["dilation"], given["groups"])
        return insert_op(self.graph, aten.conv1d.default, args, origin=conv)


def _dropped_tail(node: torch.fx.Node) -> int | None:
    """``k`` when ``node`` is ``slice(x, last dim, 0, -k, 1)``, else None."""
    out = value(node)
    if out is None:
        return None
    given = arguments(node)
    dim, start, end, step = given["dim"] % out.dim(), given["start"], given["end"], given["step"]
    if dim != out.dim() - 1 or start not in (None, 0) or step != 1 or not isinstance(end, int) or end >= 0:
        return None
    return -end


def _stride_and_padding(conv: torch.fx.Node) -> tuple[int, int] | None:
    """The stride and the padding of a ``conv1d`` used only by the slice, else None."""
    if not isinstance(conv, torch.fx.Node) or conv.target != aten.conv1d.default or len(conv.users) != 1:
        return None
    stride, padding, _, _ = conv1d_geometry(conv)
    if not isinstance(stride, int) or not isinstance(padding, int):
        return None
    return stride, padding
