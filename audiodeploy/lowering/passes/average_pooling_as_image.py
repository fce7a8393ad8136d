"""Write a 1-D average pooling as the 2-D one XNNPACK delegates, on a one-column image.

ExecuTorch 1.5.1 delegates ``avg_pool2d`` only. Edge lowering writes an
``avg_pool1d`` (SEW's squeezing of frames in pairs, a pooled downsampler) as a
2-D pooling between an ``unsqueeze`` and a ``squeeze`` that the partitioner
declines at a dynamic length, so each pooling cuts the delegate in three. The
pass writes the image form itself, as
:mod:`~audiodeploy.lowering.passes.conv_chains_as_images` does for convolutions
(the length on the height, a one-column image, so that
:mod:`~audiodeploy.lowering.passes.squeeze_unsqueeze_pairs` can join it to a
neighbouring convolution)::

    before

    x [N, C, T] ── avg_pool1d(k, s, p) ── y [N, C, T']

    after

    x [N, C, T] ── unsqueeze(-1) ── avg_pool2d([k, 1], [s, 1], [p, 0]) ── squeeze(-1) ── y

The pooling's options carry over as they are; XNNPACK's own constraints on them
(no ``ceil_mode``, no padded windows counted with ``count_include_pad``) are
checked by its partitioner, which keeps such a pooling on the portable kernels
as before.

The pass leaves a pooling as it is, and does nothing on a program without one,
when its input is not a float32 ``[N, C, T]`` tensor.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, arguments, insert_op, value

aten = torch.ops.aten


class AveragePoolingAsImagePass(NodeRewritePass):
    targets = frozenset({aten.avg_pool1d.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        val = value(x)
        if val is None or val.dtype != torch.float32 or val.dim() != 3:
            return Skip("not a float32 [N, C, T] signal")
        (kernel,), (stride,), (padding,) = (_one(given[name]) for name in ("kernel_size", "stride", "padding"))
        image = insert_op(self.graph, aten.unsqueeze.default, (x, -1), origin=node)
        pooled = insert_op(
            self.graph,
            aten.avg_pool2d.default,
            (image, [kernel, 1], [stride or kernel, 1], [padding, 0], given["ceil_mode"], given["count_include_pad"]),
            origin=node,
        )
        return insert_op(self.graph, aten.squeeze.dim, (pooled, -1), origin=node)


def _one(entry: int | list[int] | tuple[int, ...]) -> tuple[int]:
    """A pooling size as the one-element list the schema holds (an empty stride means the kernel's)."""
    if isinstance(entry, int):
        return (entry,)
    return (entry[0],) if entry else (0,)
