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
    dimension normalized as above, viewed back, then mul(w [C, 1]) and add(b [C, 1]);
    with G == C (wav2vec2's first feature layer), x as a one-column image [N, C, L, 1]
    (as XNNPACK writes a conv1d) normalized over dims (2, 3), mul(w [1, C, 1, 1]),
    add(b [1, C, 1, 1]), then squeeze(-1);
    a constant w or b is stored in the shape it broadcasts in

    var(x, dims, correction=c): mean((x - mean(x, dims))², dims) * n / (n - c); std: its square root.
    Where n depends on the input length (an x-vector's statistics pooling over the frames), n / (n - c)
    is a 0-d tensor computed from the sizes before the delegate, which takes it as an input

This is the textbook two-pass formula in fp32; PyTorch's kernels accumulate the
moments differently, and the two agree to fp32 rounding (wav2vec2-base logits:
max abs difference 5e-6 at 1 s and 9e-6 at 10 s, against the recipes' 1e-3).

The pass leaves a node as it is, and does nothing on a program without these ops,
when the node is not float32, when layer norm's normalized shape depends on the
input length, or when group norm's input has more than one length that
depends on the input (its reshapes could not be delegated).
"""

from __future__ import annotations

import functools
import math
import operator

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    is_static,
    static_view_sizes,
    tensor_of,
    value,
)

aten = torch.ops.aten


class DecomposeNormalizationPass(NodeRewritePass):
    targets = frozenset(
        {
            aten.layer_norm.default,
            aten.group_norm.default,
            aten.var.correction,
            aten.var.dim,
            aten.std.correction,
            aten.std.dim,
        }
    )

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        x = value(node.args[0]) if node.args else None
        if x is None or x.dtype != torch.float32:
            return Skip("not a float32 normalization")
        return _REWRITES[node.target](self, node)


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


def _layer_norm(pass_: DecomposeNormalizationPass, node: torch.fx.Node) -> torch.fx.Node | Skip:
    given = arguments(node)
    x, normalized_shape, weight, bias = given["input"], given["normalized_shape"], given["weight"], given["bias"]
    if not all(is_static(s) for s in normalized_shape):
        return Skip("its normalized shape depends on the input")
    graph = pass_.graph
    dims = list(range(-len(normalized_shape), 0))
    return _affine(graph, _normalize(graph, x, dims, given["eps"], node), weight, bias, node)


def _group_norm(pass_: DecomposeNormalizationPass, node: torch.fx.Node) -> torch.fx.Node | Skip:
    given = arguments(node)
    x, groups, weight, bias, eps = given["input"], given["num_groups"], given["weight"], given["bias"], given["eps"]
    shape = list(tensor_of(x).shape)
    batch, channels = shape[0], shape[1]
    grouped_sizes = static_view_sizes([batch, groups, math.prod(shape[1:]) // groups])
    original_sizes = static_view_sizes(shape)
    if grouped_sizes is None or original_sizes is None or not is_static(channels):
        return Skip("its grouped view would have two sizes that depend on the input, or its channels do")
    graph = pass_.graph
    channel_shape = [int(channels)] + [1] * (len(shape) - 2)
    if len(shape) == 3 and groups == channels:
        # One column per channel: normalized as [N, C, L, 1], which XNNPACK reduces in its channels-last layout
        # without a transpose, in the orientation of the convolutions around it (one image, no layout change).
        columns = insert_op(graph, aten.unsqueeze.default, (x, -1), origin=node)
        y = _normalize(graph, columns, [2, 3], eps, node)
        row_shape = [1, *channel_shape, 1]
        y = _affine(
            graph,
            y,
            _per_channel(pass_, graph, weight, row_shape, node),
            _per_channel(pass_, graph, bias, row_shape, node),
            node,
        )
        return insert_op(graph, aten.squeeze.dim, (y, -1), origin=node)
    grouped = insert_op(graph, aten.view.default, (x, grouped_sizes), origin=node)
    y = _normalize(graph, grouped, [-1], eps, node)
    y = insert_op(graph, aten.view.default, (y, original_sizes), origin=node)
    scale, shift = (_per_channel(pass_, graph, p, channel_shape, node) for p in (weight, bias))
    return _affine(graph, y, scale, shift, node)


def _per_channel(
    pass_: DecomposeNormalizationPass,
    graph: torch.fx.Graph,
    parameter: torch.fx.Node | None,
    shape: list[int],
    origin: torch.fx.Node,
) -> torch.fx.Node | None:
    """A per-channel weight or bias as ``[C, 1, ..., 1]``, to broadcast over the positions.

    A constant one is stored in that shape: a view would be an op at run time, in the
    contiguous layout, and XNNPACK would transpose the normalized signal to apply it.
    """
    if parameter is None:
        return None
    if parameter in pass_.constants:
        data = pass_.constants[parameter].reshape(shape)
        pass_.release_constant(parameter)
        return add_constant(pass_.exported_program, graph, f"{parameter.name}_per_channel", data)
    return insert_op(graph, aten.view.default, (parameter, shape), origin=origin)


def _var(pass_: DecomposeNormalizationPass, node: torch.fx.Node) -> torch.fx.Node | Skip:
    given = arguments(node)
    x, keepdim = given["input"], given["keepdim"]
    shape = tensor_of(x).shape
    dims = [d % len(shape) for d in (range(len(shape)) if given["dim"] is None else given["dim"])]
    if node.target in (aten.var.dim, aten.std.dim):
        correction = 1 if given["unbiased"] else 0
    else:  # no correction given is Bessel's
        correction = 1 if given["correction"] is None else given["correction"]
    count = math.prod(shape[d] for d in dims)
    graph = pass_.graph
    mean = insert_op(graph, aten.mean.dim, (x, dims, True), origin=node)
    centered = insert_op(graph, aten.sub.Tensor, (x, mean), origin=node)
    squared = insert_op(graph, aten.mul.Tensor, (centered, centered), origin=node)
    variance = insert_op(graph, aten.mean.dim, (squared, dims, keepdim), origin=node)
    if correction and is_static(count):
        variance = insert_op(graph, aten.mul.Tensor, (variance, int(count) / (int(count) - correction)), origin=node)
    elif correction:
        variance = insert_op(graph, aten.mul.Tensor, (variance, _bessel(graph, x, dims, correction, node)), origin=node)
    if node.target in (aten.std.correction, aten.std.dim):
        return insert_op(graph, aten.sqrt.default, (variance,), origin=node)
    return variance


def _bessel(graph: torch.fx.Graph, x: torch.fx.Node, dims: list[int], correction: float, origin: torch.fx.Node):
    """``n / (n - correction)`` as a 0-d float32 tensor of ``x``'s sizes: XNNPACK takes it as an input (a 0-d
    tensor it broadcasts), where a symbolic scalar would be an op it declines."""
    sizes = [insert_op(graph, aten.sym_size.int, (x, d), origin=origin) for d in dims]
    n = functools.reduce(lambda a, b: insert_op(graph, operator.mul, (a, b), origin=origin), sizes)
    ratio = insert_op(
        graph, operator.truediv, (n, insert_op(graph, operator.sub, (n, correction), origin=origin)), origin=origin
    )
    return insert_op(graph, aten.scalar_tensor.default, (ratio,), {"dtype": torch.float32}, origin=origin)


_REWRITES = {
    aten.layer_norm.default: _layer_norm,
    aten.group_norm.default: _group_norm,
    aten.var.correction: _var,
    aten.var.dim: _var,
    aten.std.correction: _var,
    aten.std.dim: _var,
}
