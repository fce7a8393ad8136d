"""Write a tensor filled with one number, shaped like an activation, as a clamp of that activation.

``torch.full_like(x, c)``, ``zeros_like`` and ``ones_like`` (and ``x.new_full(x.shape, c)``,
``new_zeros``, ``new_ones``) depend on ``x`` through its shape alone: VITS's flow
takes ``zeros_like(mean)`` as its log-scale, transformers' mask bookkeeping takes
``full_like``. ExecuTorch 1.5.1's XNNPACK partitioner has no config for them, so
each one cuts the delegate, and at a dynamic length the shape is known only when
the program runs. A clamp to ``[c, c]`` gives ``c`` whatever the element, has the
shape of its input, and XNNPACK delegates it::

    before                                   after

    x [N, C, T] ── full_like(c) ──           x [N, C, T] ── clamp(min=c, max=c) ──

``max(x, c)`` then ``min(., c)`` is ``c`` exactly for every finite or infinite
element: no arithmetic touches ``c``. A NaN element stays NaN (PyTorch's clamp
propagates it, and so did XNNPACK's x86 kernels when measured; an ARM kernel
with ``vmaxnm`` would give ``c``), where ``full_like`` gives ``c``. That is the
only difference, and it is acceptable: a program's inputs are finite
(audiodeploy's runtime refuses others), so a NaN here comes from inside the
program, in the very activation whose shape is being copied, and a computation
that meets it has its own NaN at that position already (VITS adds ``mean`` to
what ``exp(-zeros_like(mean))`` scales). A form without that difference would
need an op that ignores its input's values, and XNNPACK 1.5.1 has none: every
product, sum or comparison of a NaN in it is NaN or platform-dependent.

The pass leaves a fill as it is, and does nothing on a program without one, when
its input or its result is not float32, the fill value is not a finite number,
it asks for another layout, device or memory format than its input's, or (the
``new_*`` forms) the shape asked for is not its input's.
"""

from __future__ import annotations

import math

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, arguments, insert_op, same_shape, value

aten = torch.ops.aten

_FILL_VALUES = {
    aten.zeros_like.default: 0.0,
    aten.ones_like.default: 1.0,
    aten.new_zeros.default: 0.0,
    aten.new_ones.default: 1.0,
}
"""The fill value of the ops that take none."""
_SHAPED_LIKE_INPUT = frozenset({aten.full_like.default, aten.zeros_like.default, aten.ones_like.default})
"""The ``*_like`` ops: their result has their input's shape. The ``new_*`` ops take a size."""


class FullLikeAsClampPass(NodeRewritePass):
    targets = _SHAPED_LIKE_INPUT | {aten.new_full.default, aten.new_zeros.default, aten.new_ones.default}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        val, result = value(x), value(node)
        if val is None or result is None or val.dtype != torch.float32 or result.dtype != torch.float32:
            return Skip("its input or its result is not a float32 tensor")
        fill = _FILL_VALUES.get(node.target, given.get("fill_value"))
        if isinstance(fill, bool) or not isinstance(fill, (int, float)) or not math.isfinite(fill):
            return Skip(f"fills with {fill!r}, not a finite number")
        if given.get("layout") not in (None, torch.strided) or given.get("device") not in (None, val.device):
            return Skip("asks for another layout or device than its input's")
        memory_format = given.get("memory_format")
        if memory_format not in (None, torch.preserve_format) and not val.is_contiguous(memory_format=memory_format):
            return Skip(f"asks for {memory_format}, which its input is not in")
        if node.target not in _SHAPED_LIKE_INPUT and not same_shape(result, val):
            return Skip("the shape it asks for is not its input's")
        return insert_op(self.graph, aten.clamp.default, (x, float(fill), float(fill)), origin=node)
