"""Write a slice of a signal's last dimension (its features) as a linear with a constant selection weight.

Partial and interleaved rotary position embeddings pick features of each head: transformers' Moonshine rotates the
first ``r`` features of a head and passes the rest, ``q[..., :r]`` and ``q[..., r:]``, and rotates them in
interleaved pairs, ``x[..., 0::2]`` and ``x[..., 1::2]`` stacked back as ``(-x2, x1)``. At a dynamic length
ExecuTorch 1.5.1's XNNPACK partitioner declines a ``slice_copy`` whose input has a symbolic size, whichever
dimension it slices, so every such slice runs outside the delegate and cuts it in every attention layer. Picking
features is a product with a constant selection matrix, which XNNPACK delegates::

    before                                     after

    x [..., D] ── slice(-1, a, b, s) ──        x [..., D] ── linear(E) ──     E [k, D]: E[j, a + j s] = 1

Each output feature is one input feature times one plus zeros: exact for finite values (a non-finite feature makes
its ``0 *`` terms NaN in the other outputs of that row), at ``D`` multiply-adds per output element, small next to the
projections a head of ``D`` features goes through. A concatenation of such slices is one linear already
(:mod:`concat_of_slices_as_linear`, which runs first); this pass takes the slices read otherwise.

The pass leaves a slice as it is, and does nothing on a program without one, when it slices another dimension than
the last, the tensor is not float32, its shape is static (XNNPACK slices a static tensor), the bounds are symbolic,
or the last dimension is wider than :data:`MOST_FEATURES` (the product would cost as much as a layer's projection).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    feature_slice,
    insert_op,
    is_static,
    selection_weight,
    value,
)

aten = torch.ops.aten

MOST_FEATURES = 256
"""Widest last dimension the pass slices with a product: a head's features (64-128 in speech encoders); a hidden
state of a model's width is left to cut the delegate, which costs less than a product of its width squared."""


class FeatureSlicesAsLinearsPass(NodeRewritePass):
    targets = frozenset({aten.slice.Tensor})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        taken = feature_slice(node)
        if isinstance(taken, Skip):
            return taken
        x_val = value(taken.x)
        assert x_val is not None
        if all(is_static(size) for size in x_val.shape):
            return Skip("the tensor's shape is static: XNNPACK slices it")
        width = x_val.shape[-1]
        if width > MOST_FEATURES:
            return Skip(f"its {width} features are more than {MOST_FEATURES}: the product would cost a projection")
        if list(taken.features) == list(range(width)):
            return Skip("it takes every feature")
        weight = selection_weight([(feature, 1.0) for feature in taken.features], width)
        constant = add_constant(self.exported_program, self.graph, f"{node.name}_selection", weight)
        return insert_op(self.graph, aten.linear.default, (taken.x, constant), origin=node)
