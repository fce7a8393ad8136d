"""Write each reshape with integer sizes and at most one ``-1``, the form XNNPACK delegates.

With a dynamic input length, ``torch.export`` records reshapes with the length
read from a tensor (``sym_size``) in their sizes, e.g. splitting attention heads::

    before

    n = sym_size(q, 1)
    q [1, T, C] ── view(q, [1, n, -1, 64]) ──

    after

    q [1, T, C] ── view(q, [1, -1, 12, 64]) ──

ExecuTorch 1.5.1's XNNPACK partitioner declines a ``view_copy`` whose sizes are
symbolic ("invalid dtype": the size is not a tensor), and an ``unsqueeze_copy`` or
``squeeze_copy`` anywhere but on the last dimension, so each of them cuts the
delegate. XNNPACK's static reshape infers one size at run time: this pass rewrites
``view``, ``reshape``, ``_unsafe_view``, ``unsqueeze`` and ``squeeze`` whose output
has at most one size that depends on the input length as a ``view`` (after a
contiguous ``clone`` when the input is not contiguous) with every fixed size
written out and ``-1`` for the dynamic one, and drops a reshape to the shape its
input already has, which no single inferred size could express when two sizes
depend on the length (:mod:`drop_aliases` drops the model's own, as WavLM's
``view(bias, [-1, n, n])`` of an ``[H, n, n]`` bias; this pass those the rewrites emit). The output shape is unchanged;
the ``sym_size`` reads that only fed reshapes disappear.

A ``view`` with integer sizes is left as it is, unless a rewrite before this one
gave its input a layout that the view cannot view (then it gets its contiguous
``clone``, as above). The pass leaves a reshape as it is when its output has two
or more sizes that depend on the input length (no single inferred size can
express it), and does nothing on a program whose reshapes all take integer sizes and that has no
``squeeze`` or ``unsqueeze``.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, insert_reshape, static_view_sizes, value

aten = torch.ops.aten

_VIEWS = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})


class StaticReshapePass(NodeRewritePass):
    targets = _VIEWS | {aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        source, out = value(node.args[0]), value(node)
        if source is None or out is None:
            return Skip("no shape was recorded for its input or output")
        if list(source.shape) == list(out.shape):
            return node.args[0]  # a reshape to the shape its input already has
        if node.target in _VIEWS and all(isinstance(size, int) for size in node.args[1]):
            if node.target != aten.view.default or _viewable(source, node.args[1]):
                return Skip("its sizes are integers already")
            # A rewrite before this one changed its input's layout (attention as matmuls lays out heads unlike
            # PyTorch's attention kernel): the view export wrote no longer views it, and edge lowering would fail.
            return insert_reshape(self.graph, node.args[0], list(node.args[1]), origin=node)
        sizes = static_view_sizes(out.shape)
        if sizes is None:
            return Skip("two or more of its output sizes depend on the input length")
        return insert_reshape(self.graph, node.args[0], sizes, origin=node)


def _viewable(source: torch.Tensor, sizes: list[int]) -> bool:
    """Whether ``view(source, sizes)`` is possible on ``source``'s layout (its fake value's strides)."""
    try:
        source.view(sizes)
    except (RuntimeError, ValueError):  # torch's view kernels raise either
        return False
    return True
