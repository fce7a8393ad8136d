"""Write layer norm, group norm and variance with means, so that XNNPACK can take them.

ExecuTorch 1.5.1's XNNPACK partitioner has no config for ``native_layer_norm``,
``native_group_norm`` or ``var``: each one stays on the portable kernels and cuts
the delegate around it (wav2vec2-base: 25 layer norms, one group norm, and the
waveform's variance). This pass writes them with the statistics spelled out, in
ops XNNPACK delegates (``mean`` is made delegable by
:mod:`~audiodeploy.lowering.passes.sum_and_mean_as_xnnpack_reductions`)::

    before

    x ── layer_norm(x, [C], w, b, eps) ──

    after

    x ──┬────────────── sub ── d ──┬──────────────────────────────────────── mul ── mul(w) ── add(b) ──
        └── mean(-1) ───┘          └── mul(d, d) ── mean(-1) ── add(eps) ── rsqrt ──┘

    group_norm(x [N, C, L], G, w, b, eps): x viewed as [N, G, C/G * L], the last
    dimension normalized as above, viewed back, then mul(w [C, 1]) and add(b [C, 1])

    var(x, dims, correction=c): mean((x - mean(x, dims))², dims) * n / (n - c)

This is the textbook two-pass formula in fp32; PyTorch's kernels accumulate the
moments differently, and the two agree to fp32 rounding (wav2vec2-base logits:
max abs difference 5e-6 at 1 s and 9e-6 at 10 s, against the recipes' 1e-3).

The pass leaves a node as it is, and does nothing on a program without these ops,
when the node is not float32, when layer norm's normalized shape or var's
correction factor depends on the input length (a symbolic scalar could not be
delegated either), or when group norm's input has more than one length that
depends on the input (its reshapes could not be delegated).
"""

from __future__ import annotations

import math

import torch
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._graph import (
    ExportedProgramPass,
    argument,
    insert_op,
    is_static,
    replace_node,
    rewrite_done,
    static_view_sizes,
    value,
)

aten = torch.ops.aten


class DecomposeNormalizationPass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        modified = False
        for node in list(graph_module.graph.nodes):
            if node.op != "call_function":
                continue
            rewrite = _REWRITES.get(node.target)
            x = value(node.args[0]) if rewrite and node.args else None
            if x is None or x.dtype != torch.float32:
                continue
            with graph_module.graph.inserting_before(node):
                replacement = rewrite(graph_module.graph, node)
            if replacement is not None:
                replace_node(self.exported_program, node, replacement)
                modified = True
        if modified:
            rewrite_done(self.exported_program)
        return PassResult(graph_module, modified)


def _normalize(graph: torch.fx.Graph, x: torch.fx.Node, dims: list[int], eps: float, origin: torch.fx.Node):
    """(x - mean) * rsqrt(mean((x - mean)²) + eps) over ``dims``."""
    mean = insert_op(graph, aten.mean.dim, (x, dims, True), origin=origin)
    centered = insert_op(graph, aten.sub.Tensor, (x, mean), origin=origin)
    squared = insert_op(graph, aten.mul.Tensor, (centered, centered), origin=origin)
    variance = insert_op(graph, aten.mean.dim, (squared, dims, True), origin=origin)
    shifted = insert_op(graph, aten.add.Tensor, (variance, eps), origin=origin)
    scale = insert_op(graph, aten.rsqrt.default, (shifted,), origin=origin)
    return insert_op(graph, aten.mul.Tensor, (centered, scale), origin=origin)


def _affine(graph, y, weight, bias, origin):
    if weight is not None:
        y = insert_op(graph, aten.mul.Tensor, (y, weight), origin=origin)
    if bias is not None:
        y = insert_op(graph, aten.add.Tensor, (y, bias), origin=origin)
    return y


def _layer_norm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x, normalized_shape = node.args[:2]
    weight, bias = argument(node, 2, "weight"), argument(node, 3, "bias")
    eps = argument(node, 4, "eps", 1e-5)
    if not all(is_static(s) for s in normalized_shape):
        return None
    dims = list(range(-len(normalized_shape), 0))
    return _affine(graph, _normalize(graph, x, dims, eps, node), weight, bias, node)


def _group_norm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x, groups = node.args[:2]
    weight, bias = argument(node, 2, "weight"), argument(node, 3, "bias")
    eps = argument(node, 4, "eps", 1e-5)
    shape = list(value(x).shape)
    batch, channels = shape[0], shape[1]
    grouped_sizes = static_view_sizes([batch, groups, math.prod(shape[1:]) // groups])
    original_sizes = static_view_sizes(shape)
    if grouped_sizes is None or original_sizes is None or not is_static(channels):
        return None
    grouped = x
    if len(shape) != 3 or groups != channels:
        grouped = insert_op(graph, aten.view.default, (x, grouped_sizes), origin=node)
    y = _normalize(graph, grouped, [-1], eps, node)
    if grouped is not x:
        y = insert_op(graph, aten.view.default, (y, original_sizes), origin=node)
    # Per-channel affine: weight and bias broadcast as [C, 1, ..., 1].
    channel_shape = [int(channels)] + [1] * (len(shape) - 2)
    if weight is not None:
        weight = insert_op(graph, aten.view.default, (weight, channel_shape), origin=node)
    if bias is not None:
        bias = insert_op(graph, aten.view.default, (bias, channel_shape), origin=node)
    return _affine(graph, y, weight, bias, node)


def _var(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    shape = value(x).shape
    dims = argument(node, 1, "dim")
    dims = [d % len(shape) for d in (range(len(shape)) if dims is None else dims)]
    if node.target == aten.var.dim:  # var(x, dim, unbiased=True, keepdim=False)
        correction = 1 if argument(node, 2, "unbiased", True) else 0
        keepdim = argument(node, 3, "keepdim", False)
    else:  # var.correction(x, dim=None, *, correction=None, keepdim=False)
        correction = node.kwargs.get("correction")
        correction = 1 if correction is None else correction
        keepdim = node.kwargs.get("keepdim", False)
    count = math.prod(shape[d] for d in dims)
    if correction and not is_static(count):
        return None
    mean = insert_op(graph, aten.mean.dim, (x, dims, True), origin=node)
    centered = insert_op(graph, aten.sub.Tensor, (x, mean), origin=node)
    squared = insert_op(graph, aten.mul.Tensor, (centered, centered), origin=node)
    variance = insert_op(graph, aten.mean.dim, (squared, dims, keepdim), origin=node)
    if correction:
        variance = insert_op(graph, aten.mul.Tensor, (variance, int(count) / (int(count) - correction)), origin=node)
    return variance


_REWRITES = {
    aten.layer_norm.default: _layer_norm,
    aten.group_norm.default: _group_norm,
    aten.var.correction: _var,
    aten.var.dim: _var,
}
