"""Write a 1-D convolution that elementwise ops or paddings join to another on a one-column image, as XNNPACK does.

XNNPACK convolves only images: its preprocess writes each ``conv1d`` as
``unsqueeze(-1) ── conv2d ── squeeze(-1)`` on a one-column image ``[N, C, T, 1]``,
which it runs channels-last. A ``squeeze`` and an ``unsqueeze`` are
contiguous-layout ops to it, so each ``conv1d`` costs two transposes of its
whole input and output, also where one convolution reads another's output
directly or through elementwise ops (BigVGAN's anti-aliased activations end in
a downsampling convolution that the next convolution reads, 109 times in a
published generator; HiFi-GAN's residual blocks put a leaky ReLU between two
convolutions and add each one's output to its input; Mimi's causal convolutions
pad their input on the left). The pass writes such
convolutions as XNNPACK would, before the lowering's :mod:`squeeze_unsqueeze_pairs`
runs, which then applies the elementwise ops to the image and drops the pairs,
so that XNNPACK keeps the image channels-last from one convolution to the next::

    before

    x [N, C, T] ── conv1d(W1, b1) ── leaky_relu ── conv1d(W2, b2) ── y

    after this pass

    x ── unsqueeze(-1) ── conv2d(W1 [C1, C, K1, 1], b1) ── squeeze(-1) ── leaky_relu ──
         unsqueeze(-1) ── conv2d(W2 [C2, C1, K2, 1], b2) ── squeeze(-1) ── y

    after squeeze_unsqueeze_pairs

    x ── unsqueeze(-1) ── conv2d(W1', b1) ── leaky_relu ── conv2d(W2', b2) ── squeeze(-1) ── y

Each convolution's stride, padding and dilation go on the height. The result
is the computation XNNPACK runs for the ``conv1d`` calls, so a convolution
written on an image costs no more than before even where its neighbours stay
signals. A constant weight read by nothing else is replaced by its 4-D copy; a
computed weight (``weight_norm``) gets an ``unsqueeze`` as one more op of its
computation, which :mod:`fold_computed_gemm_weights` folds with the rest.

The pass leaves a convolution as it is, and does nothing on a program without
two joined ones, unless it is a float32 ``conv1d`` of a ``[N, C, T]`` tensor with
numeric stride, padding and dilation, whose weight is computed or a constant
only it reads, and whose input or output elementwise ops (of one tensor,
:data:`~audiodeploy.lowering.passes._graph.ELEMENTWISE`, or arithmetic of two,
:data:`~audiodeploy.lowering.passes._graph.ARITHMETIC`, read by any number of
others) or paddings by a number join to another such convolution's or to an
image's squeeze.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    conv1d_geometry,
    convolves_float32_signal,
    insert_op,
    joined_through_image_ops,
    tensor_of,
)

aten = torch.ops.aten


class ConvChainsAsImagesPass(NodeRewritePass):
    targets = frozenset({aten.conv1d.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        reason = self._unsupported(node)
        if reason is not None:
            return Skip(reason)
        if not self._joins_another(node):
            return Skip("no elementwise ops join it to another 1-D convolution")
        stride, padding, dilation, groups = conv1d_geometry(node)
        image = insert_op(self.graph, aten.unsqueeze.default, (node.args[0], -1), origin=node)
        args = (image, self._image_weight(node), arguments(node)["bias"], [stride, 1], [padding, 0], [dilation, 1])
        convolved = insert_op(self.graph, aten.conv2d.default, (*args, groups), origin=node)
        return insert_op(self.graph, aten.squeeze.dim, (convolved, -1), origin=node)

    def _joins_another(self, conv: torch.fx.Node) -> bool:
        """Whether elementwise ops or paddings join ``conv``'s input or output to another convolution's, or to an
        image's squeeze."""
        return joined_through_image_ops(conv, lambda end: _is_squeezed_image(end) or self._unsupported(end) is None)

    def _unsupported(self, conv: torch.fx.Node) -> str | None:
        """Why ``conv`` cannot be written on an image, or None."""
        if conv.op != "call_function" or conv.target != aten.conv1d.default:
            return "not a conv1d"
        if not convolves_float32_signal(conv):
            return "not a float32 convolution of a [N, C, T] tensor"
        stride, padding, dilation, _ = conv1d_geometry(conv)
        if not all(isinstance(v, int) for v in (stride, padding, dilation)):
            return "its stride, padding or dilation is not one number"
        weight = conv.args[1]
        if weight.op == "placeholder" and weight not in self.constants:
            return "its weight is an input, a mutated buffer or data stored apart"
        if weight in self.constants and len(weight.users) > 1:
            return "its weight is a constant also read elsewhere: a 4-D copy would store it twice"
        return None

    def _image_weight(self, conv: torch.fx.Node) -> torch.fx.Node:
        """``W [Co, C / groups, K, 1]``: a constant, or an ``unsqueeze`` on a computed weight."""
        weight = conv.args[1]
        if weight in self.constants:
            self.release_constant(weight)
            data = self.constants[weight].unsqueeze(-1)
            return add_constant(self.exported_program, self.graph, f"{weight.name}_image", data)
        return insert_op(self.graph, aten.unsqueeze.default, (weight, -1), origin=conv)


def _is_squeezed_image(node: torch.fx.Node) -> bool:
    """Whether ``node`` is the squeeze of a one-column image's convolution (time on the height; not a one-row image,
    time on the width)."""
    if node.op != "call_function" or node.target != aten.squeeze.dim:
        return False
    image = node.args[0]
    return image.target == aten.conv2d.default and tensor_of(image).dim() == 4 and node.args[1] % 4 == 3
