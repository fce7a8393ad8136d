"""Apply elementwise ops to images before their squeeze, and drop a squeeze with the unsqueeze that undoes it.

Rewrites that treat a signal ``[N, C, T]`` as a one-column image ``[N, C, T, 1]``
(:mod:`conv_chains_as_images`, :mod:`strided_conv_as_gemm`, the per-channel
group norm of :mod:`decompose_normalization`) start with ``unsqueeze(x, -1)`` and
end with ``squeeze(y, -1)``, each on its own. XNNPACK keeps an image in its
channels-last layout from one op to the next, but a ``squeeze`` or ``unsqueeze`` is
a contiguous-layout op to it: each pair costs two transposes of the whole signal
(about 60 ms at 10 s of audio in wav2vec2-base's feature encoder; 6 of 70 ms in a
Piper voice's decoder, whose residual blocks add each convolution's output to the
block's input). The pass moves each squeeze past the elementwise ops that read it,
so that they run on the image, and drops the squeeze and unsqueeze pairs that then
meet (HiFi-GAN's second residual block, its input ``x`` a signal)::

    before

    x ── leaky_relu ── unsqueeze ── conv2d ── squeeze ── add(·, x) ── leaky_relu ── unsqueeze ── conv2d ── squeeze ──

    after

    x ── leaky_relu ── unsqueeze ── conv2d ── add(·, x') ── leaky_relu ── conv2d ── squeeze ──
    x ── unsqueeze ── x' (once, for every op that reads x on the image)

A padding by a number moves too, its pads given the image's size-one dimension
unpadded (ExecuTorch pads a channels-last image as it is): Mimi's causal
convolutions pad their input on the left, two transposes each (about 40 of
374 ms in its encoder at 10 s)::

    before

    ── conv2d ── squeeze ── elu ── pad([k - 1, 0]) ── unsqueeze ── conv2d ──

    after

    ── conv2d ── elu ── constant_pad_nd([0, 0, k - 1, 0]) ── conv2d ──

An op moves past its squeezes when it is elementwise: a function of one tensor
(:data:`~audiodeploy.lowering.passes._graph.ELEMENTWISE`) or arithmetic of two
(:data:`~audiodeploy.lowering.passes._graph.ARITHMETIC`) whose other tensor is
the squeeze of an image at the same dimension, a constant (given the size-one
dimension in a copy), or a signal of the op's rank that the op's result, through
elementwise ops, reaches an image op with: XNNPACK then transposes that signal
once instead of the squeezed image. Each op computes the same elements on the
image, and a squeeze stays for whatever else reads it, so nothing runs twice. The
pass leaves an op as it is, and does nothing on a program without squeezed
images, when it reads no squeeze of a size-one dimension of its rank, squeezes
of different dimensions, or a signal that broadcasts or that nothing it feeds
makes an image again; a padding when it pads by amounts that are not numbers of
at least zero, or with something other than a number; and an unsqueeze when it
does not put back the dimension its input's squeeze removed.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from audiodeploy.lowering.passes._graph import (
    CONSTANT_PADDINGS,
    ELEMENTWISE_OPS,
    MOST_OPS_SEARCHED,
    NodeRewritePass,
    Skip,
    add_constant,
    constant_padding,
    insert_op,
    moves_with_images,
    tensor_of,
    value,
)

aten = torch.ops.aten


class SqueezeUnsqueezePairsPass(NodeRewritePass):
    targets = frozenset({aten.unsqueeze.default, *ELEMENTWISE_OPS, *CONSTANT_PADDINGS})

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        self._unsqueezed: dict[tuple[torch.fx.Node, int], torch.fx.Node] = {}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if node.target == aten.unsqueeze.default:
            squeezed = node.args[0]
            if _squeezed_dim(squeezed) is None or node.args[1] % tensor_of(node).dim() != _squeezed_dim(squeezed):
                return Skip("it does not put back a dimension squeezed before it")
            return squeezed.args[0]
        if node.target in CONSTANT_PADDINGS:
            return self._padding_on_image(node)
        rank = tensor_of(node).dim()
        tensors = [a for a in node.args if isinstance(a, torch.fx.Node)]
        dims = {_squeezed_dim(a) for a in tensors if _squeezed_dim(a) is not None and tensor_of(a).dim() == rank}
        if not dims:
            return Skip("it reads no squeeze of a size-one dimension of its rank")
        (dim,) = dims if len(dims) == 1 else (None,)
        if dim is None or any(tensor_of(a).dim() > rank for a in tensors):
            return Skip("it reads squeezes of different dimensions, or broadcasts to a higher rank")
        signals = [a for a in tensors if a not in self.constants and _squeezed_dim(a) is None]
        if any(tensor_of(a).dim() != rank for a in signals):
            return Skip("it also reads a signal that broadcasts to its rank")
        if signals and not _becomes_image(node, dim):
            return Skip("it also reads a signal, and nothing it feeds through elementwise ops is an image again")
        args = tuple(self._on_image(a, dim, rank) for a in node.args)
        image = insert_op(self.graph, node.target, args, dict(node.kwargs), origin=node)
        return insert_op(self.graph, aten.squeeze.dim, (image, dim), origin=node)

    def _padding_on_image(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        """The padding of a squeezed image, on the image: its size-one dimension is not padded."""
        padding = constant_padding(node)
        if padding is None:
            return Skip("not a padding with a number by numbers of at least zero")
        x, pads, fill = padding
        dim = _squeezed_dim(x)
        if dim is None:
            return Skip("it reads no squeeze of a size-one dimension of its rank")
        image_pads = _pads_with_dimension(pads, tensor_of(x).dim(), dim)
        image = insert_op(self.graph, aten.constant_pad_nd.default, (x.args[0], image_pads, fill), origin=node)
        return insert_op(self.graph, aten.squeeze.dim, (image, dim), origin=node)

    def _on_image(self, arg: object, dim: int, rank: int) -> object:
        """What ``arg`` of an op of rank ``rank`` is on the image: the squeezed image, a constant given the size-one
        dimension (aligned as broadcasting aligns it), or the number it is."""
        if not isinstance(arg, torch.fx.Node):
            return arg
        if _squeezed_dim(arg) is not None:
            return arg.args[0]
        if arg not in self.constants:  # a signal: one unsqueeze, before the first op that reads it on the image
            if (arg, dim) not in self._unsqueezed:
                self._unsqueezed[arg, dim] = insert_op(self.graph, aten.unsqueeze.default, (arg, dim), origin=arg)
            return self._unsqueezed[arg, dim]
        data = self.constants[arg]
        if data.dim() == 0:
            return arg
        self.release_constant(arg)
        on_image = data.reshape((1,) * (rank - data.dim()) + tuple(data.shape)).unsqueeze(dim)
        return add_constant(self.exported_program, self.graph, f"{arg.name}_image", on_image)


def _becomes_image(node: torch.fx.Node, dim: int) -> bool:
    """Whether ``node``'s value, through elementwise ops, is unsqueezed at ``dim`` again (an image op reads it)."""
    frontier, seen = [node], set[torch.fx.Node]()
    while frontier and len(seen) < MOST_OPS_SEARCHED:
        signal = frontier.pop()
        seen.add(signal)
        for user in signal.users:
            if user.target == aten.unsqueeze.default and user.args[1] % tensor_of(user).dim() == dim:
                return True
            if moves_with_images(user) and user not in seen:
                frontier.append(user)
    return False


def _pads_with_dimension(pads: list[int], rank: int, dim: int) -> list[int]:
    """``pads`` (``F.pad``'s, the last dimension's pair first) of a tensor of ``rank`` dimensions, for that tensor
    with a size-one dimension inserted at ``dim``, which is not padded."""
    pairs = {rank - 1 - index // 2: pads[index : index + 2] for index in range(0, len(pads), 2)}
    inserted = {(d if d < dim else d + 1): pair for d, pair in pairs.items()}
    return [amount for d in range(rank, min(inserted) - 1, -1) for amount in inserted.get(d, [0, 0])]


def _squeezed_dim(node: object) -> int | None:
    """The dimension (of the image) ``node`` squeezes away if it is the ``squeeze`` of a size-one dimension, else
    None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target != aten.squeeze.dim:
        return None
    image = value(node.args[0])
    if image is None:
        return None
    dim = node.args[1] % image.dim()
    return dim if image.shape[dim] == 1 else None
