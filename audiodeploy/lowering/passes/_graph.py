"""What the ATen rewrite passes share: inserting an op with its value, and static reshape sizes.

The rewrites run on the program ``torch.export`` returns, before edge lowering.
Each node they insert gets ``meta["val"]`` (computed on the program's fake
tensors, symbolic sizes included) so that the next pass can read shapes, and the
``nn_module_stack`` of the node it replaces so that reports still name the module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, TypeVar

import sympy
import torch
from executorch.backends.transforms.utils import create_constant_placeholder, delete_constant_placeholder
from executorch.exir.passes.constant_prop_pass import get_constant_placeholder_dict
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_symbols, statically_known_true
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

aten = torch.ops.aten

# Metadata that says where a node came from; copied onto the nodes that replace it.
_PROVENANCE = ("nn_module_stack", "stack_trace", "source_fn_stack", "from_node", "seq_nr")


def insert_op(
    graph: torch.fx.Graph,
    target: torch._ops.OpOverload,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    origin: torch.fx.Node,
) -> torch.fx.Node:
    """Insert ``target(*args, **kwargs)`` at the graph's insertion point, with its fake value.

    ``origin`` is the node being rewritten: the new node says it comes from there (and an op that reads no tensor,
    an ``arange`` of a size, computes its fake value in the fake mode of ``origin``'s).
    """
    kwargs = kwargs or {}
    node = graph.call_function(target, args, kwargs)
    node.meta["val"] = fake_value(target, args, kwargs, like=origin)
    for key in _PROVENANCE:
        if key in origin.meta:
            node.meta[key] = origin.meta[key]
    return node


def insert_reshape(graph: torch.fx.Graph, x: torch.fx.Node, sizes: list, *, origin: torch.fx.Node) -> torch.fx.Node:
    """``view(x, sizes)``, after a contiguous ``clone`` when ``x`` is not contiguous.

    Not ``reshape``: edge lowering decomposes a ``reshape`` of a non-contiguous
    tensor into a copy and a view whose sizes are the output's, symbolic ones
    included, which undoes a ``-1``.
    """
    if not tensor_of(x).is_contiguous():
        x = insert_op(graph, aten.clone.default, (x,), {"memory_format": torch.contiguous_format}, origin=origin)
    return insert_op(graph, aten.view.default, (x, sizes), origin=origin)


def fake_value(
    target: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], *, like: torch.fx.Node | None = None
) -> Any:
    """The value ``target`` gives on the fake values of its argument nodes (in the fake mode of ``like``'s value
    when they hold no tensor)."""
    args, kwargs = torch.fx.map_arg((args, kwargs), lambda n: n.meta["val"])
    leaves = pytree.tree_leaves((args, kwargs))
    mode = detect_fake_mode(leaves)
    if mode is None and isinstance(target, torch._ops.OpOverload) and like is not None:
        # A tensor op of sizes alone (arange): outside a fake mode it would compute on the sizes' example values.
        mode = detect_fake_mode(pytree.tree_leaves(like.meta.get("val")))
    if mode is None:  # integer math on sizes: symbolic sizes compute themselves
        return target(*args, **kwargs)
    env = mode.shape_env
    known = dict(env.replacements) if env is not None else {}
    ranges = dict(env.var_to_range) if env is not None else {}
    # The Python meta kernels, as torch.export traces with: some C++ ones (constant_pad_nd)
    # read sizes as integers, which would specialize the program to the example's length.
    with mode, enable_python_dispatcher(), _backend_choice_unguarded(target, env):
        result = target(*args, **kwargs)
    if env is not None:
        fixed = [f"{s} = {e}" for s, e in env.replacements.items() if s not in known and e.is_number]
        narrowed = [f"{s} in {env.var_to_range[s]} (was {r})" for s, r in ranges.items() if env.var_to_range[s] != r]
        if fixed or narrowed:
            raise RuntimeError(
                f"rewriting with {target} fixed or narrowed the program's dynamic sizes "
                f"({', '.join(fixed + narrowed)}); this is a bug in the rewrite"
            )
    return result


def _backend_choice_unguarded(target: Any, env: ShapeEnv | None) -> contextlib.AbstractContextManager[object]:
    """No guards while ``target`` (a convolution) computes its fake value.

    torch's fake convolution asks which CPU kernel eager would run, to give the output that kernel's memory format,
    and that choice compares sizes with thresholds (oneDNN past 20480 input elements). Guarded on the example's
    length, it narrowed the length's range to the example's side of the threshold, and the guard, kept with the
    program, made its fp16 export refuse the range (`export hifigan --dtype fp16` over its default 1-10 s). The
    memory format is not part of the program.
    """
    if env is None or target not in _CONVOLUTIONS:
        return contextlib.nullcontext()
    return env.suppress_guards()


_CONVOLUTIONS = frozenset(
    {
        aten.convolution.default,
        aten.conv1d.default,
        aten.conv2d.default,
        aten.conv_transpose1d.default,
        aten.conv_transpose2d.input,
    }
)


def arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The arguments of an op call by their schema names, with the schema's defaults for those the call leaves out.

    torch.fx's normalization (which names an op's ``self`` argument ``input``): a pass reads an argument the same
    way whether the program passes it by position, by keyword or not at all.
    """
    normalized = node.normalized_arguments(node.graph.owning_module, normalize_to_only_use_kwargs=True)
    if normalized is not None:
        return dict(normalized.kwargs)
    return _bound_to_schema(node)


def _bound_to_schema(node: torch.fx.Node) -> dict[str, Any]:
    """:func:`arguments` bound from the op's schema here: torch.fx declines to normalize a call of a schema
    with a positional-only argument (an argument named ``from``, a Python keyword)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        raise TypeError(f"{node.format_node()}: only a call of an op with a schema has named arguments")
    bound: dict[str, Any] = {}
    for index, parameter in enumerate(schema.arguments):
        name = "input" if parameter.name == "self" else parameter.name
        if index < len(node.args) and not parameter.kwarg_only:
            bound[name] = node.args[index]
        elif parameter.name in node.kwargs:
            bound[name] = node.kwargs[parameter.name]
        elif parameter.has_default_value():
            bound[name] = parameter.default_value
        else:
            raise TypeError(f"{node.format_node()}: argument {parameter.name} is missing")
    return bound


def _single(entry: Any) -> Any:
    """A list of one unwrapped to its entry; a list of another length, or a string padding, as given."""
    return entry[0] if isinstance(entry, (list, tuple)) and len(entry) == 1 else entry


def conv1d_geometry(conv: torch.fx.Node) -> tuple[Any, Any, Any, int]:
    """``(stride, padding, dilation, groups)`` of a ``conv1d`` call, each list of one unwrapped to its entry."""
    given = arguments(conv)
    return _single(given["stride"]), _single(given["padding"]), _single(given["dilation"]), given["groups"]


@dataclass(frozen=True)
class TransposedConv1d:
    """The arguments of a ``conv_transpose1d`` call, each list of one unwrapped to its entry (``Any``: a pass
    checks they are ints before it computes with them)."""

    x: torch.fx.Node
    weight: torch.fx.Node
    bias: torch.fx.Node | None
    stride: Any
    padding: Any
    output_padding: Any
    groups: int
    dilation: Any

    @classmethod
    def of(cls, node: torch.fx.Node) -> TransposedConv1d:
        given = arguments(node)
        return cls(
            given["input"],
            given["weight"],
            given["bias"],
            _single(given["stride"]),
            _single(given["padding"]),
            _single(given["output_padding"]),
            given["groups"],
            _single(given["dilation"]),
        )

    def cropped(self, crop: OutputCrop) -> TransposedConv1d | None:
        """The transposed convolution whose output is this one's after ``crop``, or None without numeric padding.

        Output step ``t`` of a transposed convolution with padding ``p`` is step ``t + p`` of the unpadded one, and
        ``output_padding`` lengthens it at the end only: keeping steps ``a`` to ``L - b`` is padding ``p + a`` and
        output padding ``q + a - b`` (negative where the crop takes more than ``q``).
        """
        if not isinstance(self.padding, int) or not isinstance(self.output_padding, int):
            return None
        padding, output_padding = self.padding + crop.start, self.output_padding + crop.start - crop.dropped
        return dataclasses.replace(self, padding=padding, output_padding=output_padding)


@dataclass(frozen=True)
class OutputCrop:
    """A slice that keeps a 1-D signal's steps from ``start`` to ``dropped`` before its end.

    Causal codecs (EnCodec, Mimi) cut a transposed convolution's output so instead of padding it: a slice of a
    symbolic length, which ExecuTorch 1.5.1's XNNPACK partitioner declines, so it cuts the delegate.
    """

    slice: torch.fx.Node
    start: int
    dropped: int

    @classmethod
    def of(cls, node: torch.fx.Node) -> OutputCrop | None:
        """The crop of ``node``'s last dimension by its only user, with step 1 and a numeric start and number of
        steps dropped at the end; else None."""
        if len(node.users) != 1:
            return None
        (user,) = node.users
        signal, kept = value(node), value(user)
        if user.target != aten.slice.Tensor or signal is None or kept is None:
            return None
        given = arguments(user)
        start = given["start"] if given["start"] is not None else 0
        if given["dim"] % signal.dim() != signal.dim() - 1 or given["step"] != 1:
            return None
        if not isinstance(start, int) or start < 0:
            return None
        dropped = signal.shape[-1] - kept.shape[-1] - start
        if not is_static(dropped) or int(dropped) < 0:  # negative: the start is past the end
            return None
        return cls(user, start, int(dropped))


def value(node: torch.fx.Node) -> torch.Tensor | None:
    """The (fake) tensor ``torch.export`` recorded for ``node``; None for a node that is not a tensor."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def dtype_of(node: Any) -> torch.dtype | None:
    """The dtype of a tensor node; None for a number, a size or a node that holds no tensor."""
    val = value(node)
    return val.dtype if val is not None else None


def tensor_of(node: torch.fx.Node) -> torch.Tensor:
    """:func:`value` where the graph guarantees a tensor (a GEMM's weight, a pass's own output)."""
    val = value(node)
    if val is None:
        raise ValueError(f"{node} holds no tensor value: a pass read it as a tensor")
    return val


def convolves_float32_signal(conv: torch.fx.Node) -> bool:
    """Whether a 1-D convolution (plain or transposed) reads a float32 ``[N, C, T]`` signal, and its weight and
    output carry their values: what a rewrite of it into other convolutions needs to know."""
    x, weight = conv.args[:2]
    x_val = value(x)
    return (
        x_val is not None and value(weight) is not None and value(conv) is not None
        and x_val.dtype == torch.float32 and x_val.dim() == 3
    )  # fmt: skip


def is_static(size: int | torch.SymInt) -> bool:
    return isinstance(size, int) or not free_symbols(size)


@dataclass(frozen=True)
class InputSize:
    """Where a size symbol is read: dimension ``dim`` of the program's input ``index`` (``node``) has the size
    ``a * symbol + b`` (export writes a length of 320 frames plus 80 samples so)."""

    node: torch.fx.Node
    index: int
    dim: int
    a: int
    b: int


def input_sizes(ep: ExportedProgram) -> dict[sympy.Symbol, InputSize]:
    """Each size symbol an input dimension is a multiple of (plus a number): the first such dimension."""
    sizes: dict[sympy.Symbol, InputSize] = {}
    names = set(ep.graph_signature.user_inputs)
    inputs = [node for node in ep.graph.nodes if node.op == "placeholder" and node.name in names]
    for index, node in enumerate(inputs):
        for dim, size in enumerate(getattr(node.meta.get("val"), "shape", ())):
            if not isinstance(size, torch.SymInt) or len(size.node.expr.free_symbols) != 1:
                continue
            (symbol,) = size.node.expr.free_symbols
            polynomial = size.node.expr.as_poly(symbol)
            if polynomial is None or polynomial.degree() != 1:
                continue
            a, b = polynomial.all_coeffs()
            if a.is_Integer and b.is_Integer and a > 0:
                sizes.setdefault(symbol, InputSize(node, index, dim, int(a), int(b)))
    return sizes


def static_view_sizes(shape: Sequence[int | torch.SymInt]) -> list[int] | None:
    """``shape`` with its one symbolic size written as ``-1``; ``None`` if it has more than one.

    XNNPACK's static reshape takes integer sizes with at most one inferred size.
    """
    sizes = [int(s) if is_static(s) else -1 for s in shape]
    return sizes if sizes.count(-1) <= 1 else None


def replace_node(ep: ExportedProgram, node: torch.fx.Node, replacement: torch.fx.Node) -> None:
    """Make every user of ``node`` (and the program's outputs) read ``replacement``; erase ``node``.

    The views of ``replacement`` get the layout they now have: the replacement has the shape of what it replaces,
    not always its strides, and a ``view`` downstream is only valid on some layouts (see :func:`refresh_views`).
    """
    node.replace_all_uses_with(replacement)
    ep.graph_signature.replace_all_uses(node.name, replacement.name)
    ep.graph.erase_node(node)
    refresh_views(replacement)


def refresh_views(node: torch.fx.Node) -> None:
    """Recompute the fake value of every view of ``node`` (and views of those), from ``node``'s value as it is now.

    A rewrite that computes a value another way (attention as matmuls) can lay it out otherwise than the op it
    replaces; the transposes and views after it still carry the strides export recorded, and a pass that asks
    whether a view of them is contiguous, or edge lowering's own view kernels, would be answered from the old
    layout. Shapes are unchanged; only strides can differ.
    """
    pending = [user for user in node.users if is_view_op(user)]
    while pending:
        view = pending.pop()
        if not isinstance(view.meta.get("val"), torch.Tensor):
            continue
        try:
            refreshed = fake_value(view.target, view.args, view.kwargs)
        except (RuntimeError, ValueError):  # torch's view kernels raise either
            # Not viewable on the new layout: the stale value stays, and StaticReshapePass copies before such a view.
            continue
        if not (isinstance(refreshed, torch.Tensor) and same_shape(refreshed, view.meta["val"])):
            # Sizes written another way (a size the view reads was replaced by an equal one sympy cannot relate,
            # and an inferred -1 became a quotient it cannot simplify): the recorded shape is the one to keep.
            continue
        view.meta["val"] = refreshed
        pending.extend(user for user in view.users if is_view_op(user))


def is_view_op(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def viewed_chain(node: torch.fx.Node) -> list[torch.fx.Node]:
    """``node``, the tensor it views, the one that one views, ..., down to the first that is not a view."""
    chain = [node]
    while is_view_op(chain[-1]) and isinstance(chain[-1].args[0], torch.fx.Node):
        chain.append(chain[-1].args[0])
    return chain


def replace_input(ep: ExportedProgram, user: torch.fx.Node, node: torch.fx.Node, replacement: torch.fx.Node) -> None:
    """Make ``user`` (possibly the output node) read ``replacement`` instead of ``node``."""
    user.replace_input_with(node, replacement)
    if user.op == "output":
        ep.graph_signature.replace_all_uses(node.name, replacement.name)


def add_constant(ep: ExportedProgram, graph: torch.fx.Graph, name: str, data: torch.Tensor) -> torch.fx.Node:
    """A new lifted constant holding a copy of ``data``, named ``name`` (with a suffix if taken), before the user inputs.

    The copy is contiguous and owns its storage: XNNPACK serializes a constant that is a
    view with the bytes of its whole base tensor. Its strides are the contiguous ones even
    where a dimension of size one would allow others: a ``[Co, C, 1, 1]`` weight with
    channels-last strides makes torch's convolution return a channels-last tensor.

    One per use, not one shared between rewrites: 1.5.1's ``to_backend`` cannot give
    a lifted constant to two delegates (``to_executorch`` then fails with "is not a
    buffer"); the program stores identical bytes once anyway.
    """
    taken = {n.name for n in graph.nodes}
    unique, index = name, 0
    while unique in taken:
        index += 1
        unique = f"{name}_{index}"
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    first_input = next(
        n for n, spec in zip(placeholders, ep.graph_signature.input_specs) if spec.kind == InputKind.USER_INPUT
    )
    with graph.inserting_before(first_input):
        return create_constant_placeholder(
            ep, graph, unique, InputKind.CONSTANT_TENSOR, data.detach().clone(memory_format=torch.contiguous_format)
        )


def gather_taps(
    ep: ExportedProgram,
    graph: torch.fx.Graph,
    image: torch.fx.Node,
    taps: int,
    stride: int,
    padding: int,
    dilation: int,
    name: str,
    *,
    origin: torch.fx.Node,
    time_dim: int = 3,
) -> torch.fx.Node:
    """``[N, taps * C, 1, To]`` from a one-row image ``[N, C, 1, T]``: channel ``t * C + c`` holds tap ``t`` of
    channel ``c`` (the input a 1x1 GEMM reads to compute a ``taps``-wide convolution). With ``time_dim=2``, the
    same from a one-column image ``[N, C, T, 1]`` (as XNNPACK and :mod:`.conv_chains_as_images` write a ``conv1d``),
    ``[N, taps * C, To, 1]``.

    One depthwise convolution with a one-hot kernel per tap, concatenated: XNNPACK's depthwise kernel takes one
    output channel per group (a channel multiplier of ``taps`` runs as a slow grouped GEMM). With one channel,
    one convolution gathers every tap. On one-row images XNNPACK keeps the taps channels-last from op to op.
    """
    channels = int(tensor_of(image).shape[1])
    if taps == 1 and (stride, padding) == (1, 0):
        return image

    def along_time(step: int, other: int) -> list[int]:
        return [other, step] if time_dim == 3 else [step, other]

    def select(one_hot: torch.Tensor, groups: int, suffix: str) -> torch.fx.Node:
        selection = add_constant(ep, graph, f"{name}{suffix}", one_hot.view(-1, 1, *along_time(taps, 1)))
        args = (image, selection, None, along_time(stride, 1), along_time(padding, 0), along_time(dilation, 1), groups)
        return insert_op(graph, aten.conv2d.default, args, origin=origin)

    if channels == 1:
        return select(torch.eye(taps), 1, "s")
    columns = []
    for tap in range(taps):
        one_hot = torch.zeros(channels, taps)
        one_hot[:, tap] = 1
        columns.append(select(one_hot, channels, str(tap)))
    return insert_op(graph, aten.cat.default, (columns, 1), origin=origin)


def external_data_tag(node: torch.fx.Node) -> str | None:
    """The ``.ptd`` file a parameter is tagged to be stored in, if any."""
    custom = node.meta.get("custom") or {}
    return custom.get("delegate_constant_tag") or node.meta.get("constant_tag")


_SYMBOLIC_INT_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg}


def is_pure(target: object) -> bool:
    """An op without side effects whose result depends on its arguments alone (no mutation, no randomness)."""
    if isinstance(target, torch._ops.OpOverload):
        return not target._schema.is_mutable and torch.Tag.nondeterministic_seeded not in target.tags
    return target is operator.getitem or target in _SYMBOLIC_INT_OPS


def ancestors(
    starts: Sequence[torch.fx.Node], expand: Callable[[torch.fx.Node], bool] = lambda node: True
) -> set[torch.fx.Node]:
    """``starts`` and every node they are computed from, reading the inputs of a node only where ``expand`` says so."""
    reached: set[torch.fx.Node] = set()
    stack = list(starts)
    while stack:
        node = stack.pop()
        if node not in reached:
            reached.add(node)
            if expand(node):
                stack.extend(node.all_input_nodes)
    return reached


@torch.no_grad()
def evaluate(computation: Iterable[torch.fx.Node], known: Mapping[torch.fx.Node, Any]) -> dict[torch.fx.Node, Any]:
    """Run the nodes of `computation`, in the order given (graph order), on real values: those `known` (constants,
    sizes) and those computed before them. Every node's value, the known ones included."""
    values = dict(known)
    for node in computation:
        if node not in values:
            args, kwargs = torch.fx.map_arg((node.args, node.kwargs), values.__getitem__)
            values[node] = node.target(*args, **kwargs)
    return values


def evaluated_at(
    computation: list[torch.fx.Node],
    node: torch.fx.Node,
    sources: Mapping[torch.fx.Node, torch.Tensor],
    symbol: sympy.Symbol | None,
    symbol_value: int,
) -> torch.Tensor:
    """The real value of ``node``, computed by ``computation`` (graph order; constants from ``sources`` and sizes)
    when ``symbol`` is ``symbol_value`` (``None``: every size is a number)."""
    known: dict[torch.fx.Node, Any] = {}
    for current in computation:
        if current in sources:
            known[current] = sources[current]
        elif current.target == aten.sym_size.int:
            size = current.meta["val"]
            # A size without a symbol (the computation depends on none) is its number.
            known[current] = (
                int(size.node.expr.subs(symbol, symbol_value))
                if isinstance(size, torch.SymInt) and symbol is not None
                else int(size)
            )
    return evaluate(computation, known)[node]


def constant_sources(ep: ExportedProgram) -> dict[torch.fx.Node, torch.Tensor]:
    """The placeholders holding parameters, unmutated buffers and constants, with their values (ExecuTorch's
    ``get_constant_placeholder_dict``), less the parameters tagged for a ``.ptd`` file: a rewrite must not copy
    those into the program."""
    return {node: data for node, data in get_constant_placeholder_dict(ep).items() if external_data_tag(node) is None}


ELEMENTWISE = frozenset(
    {
        aten.gelu.default,
        aten.relu.default,
        aten.leaky_relu.default,
        aten.silu.default,
        aten.tanh.default,
        aten.sigmoid.default,
        aten.hardtanh.default,
        aten.hardswish.default,
        aten.elu.default,
        aten.clamp.default,
        aten.abs.default,
        aten.neg.default,
        aten.exp.default,
        aten.log.default,
        aten.sqrt.default,
        aten.rsqrt.default,
        aten.sin.default,
        aten.cos.default,
        aten.pow.Tensor_Scalar,
    }
)
"""Ops of one tensor (and scalars) that compute each element from that element alone."""

ARITHMETIC = frozenset({aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor})
"""Ops of two tensors (or a tensor and a number) that compute each element from the elements broadcast to it."""

ELEMENTWISE_OPS = ELEMENTWISE | ARITHMETIC
"""Every op that computes each element of its result from the elements at that position alone."""

MOST_OPS_SEARCHED = 64
"""How far a search through elementwise ops looks: an image op is a few ops away; the bound keeps a pass linear."""

CONSTANT_PADDINGS = frozenset({aten.constant_pad_nd.default, aten.pad.default})
"""Ops that pad a tensor, among them with a number (``F.pad``'s constant mode)."""


def constant_padding(node: object) -> tuple[torch.fx.Node, list[int], float] | None:
    """``(x, pads, fill)`` when ``node`` pads ``x`` with the number ``fill`` by amounts that are numbers of at
    least zero (``pads`` as ``F.pad`` takes them: the last dimension's pair first), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target not in CONSTANT_PADDINGS:
        return None
    given = arguments(node)
    if node.target == aten.pad.default and given["mode"] != "constant":
        return None
    x, pads, fill = given["input"], given["pad"], given["value"]
    if not isinstance(x, torch.fx.Node) or not all(isinstance(amount, int) and amount >= 0 for amount in pads):
        return None
    return x, list(pads), 0.0 if fill is None else fill


def joined_through_image_ops(node: torch.fx.Node, is_end: Callable[[torch.fx.Node], bool]) -> bool:
    """Whether ops that move with images (:func:`moves_with_images`, read by any number of others: a residual
    connection joins too) lead from ``node``'s first input or its output to a node ``is_end`` accepts: one that
    computes the signal, or reads it first. A search of at most :data:`MOST_OPS_SEARCHED` ops, both ways."""
    frontier, seen = [node.args[0], node], {node}
    while frontier and len(seen) < MOST_OPS_SEARCHED:
        signal = frontier.pop()
        if not isinstance(signal, torch.fx.Node):
            continue
        if signal is not node:
            if is_end(signal):
                return True
            if moves_with_images(signal):
                frontier += [a for a in signal.args if isinstance(a, torch.fx.Node) and a not in seen]
        for user in signal.users:
            if user is node or user in seen:
                continue
            if user.args[0] is signal and is_end(user):
                return True
            if moves_with_images(user):
                frontier.append(user)
        seen.add(signal)
    return False


def moves_with_images(node: torch.fx.Node) -> bool:
    """Whether XNNPACK runs ``node`` on a channels-last image as it runs it on the signal: an elementwise op, or a
    constant padding (ExecuTorch's XNNPACK backend permutes the pads of a channels-last input)."""
    return node.op == "call_function" and (node.target in ELEMENTWISE_OPS or constant_padding(node) is not None)


def rewrite_done(ep: ExportedProgram) -> None:
    """Drop nodes the rewrite left unused (symbolic size reads, replaced ops) and recompile."""
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()


class ExportedProgramPass(PassBase):
    """A graph pass that also keeps its exported program's signature in step (outputs, constants)."""

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__()
        self.exported_program = exported_program


@dataclass(frozen=True)
class Skip:
    """What :meth:`NodeRewritePass.rewrite` returns for a node it leaves as it is: the reason."""

    reason: str


def dense_strided_conv1d(conv: torch.fx.Node) -> tuple[int, int] | Skip:
    """``(stride, padding)`` of a float32 ``conv1d`` with a stride above one, dilation one, one group and a numeric
    padding (the strided convolutions a GEMM can take apart); else why it is not one."""
    x_val, w_val = value(conv.args[0]), value(conv.args[1])
    if x_val is None or w_val is None or x_val.dtype != torch.float32 or w_val.dtype != torch.float32:
        return Skip("not float32")
    stride, padding, dilation, groups = conv1d_geometry(conv)
    if not isinstance(stride, int) or stride < 2:
        return Skip("stride 1: nothing to take apart")
    if dilation != 1 or groups != 1 or not isinstance(padding, int):
        return Skip(f"dilation {dilation}, groups {groups}, padding {padding}: only dense, undilated, numeric padding")
    return stride, padding


Rewrite: TypeAlias = "torch.fx.Node | Mapping[torch.fx.Node, torch.fx.Node] | Skip"
"""What :meth:`NodeRewritePass.rewrite` returns: the node's replacement; for a small region (a split and its
pieces), each replaced node with its replacement; or why the node stays."""


class NodeRewritePass(ExportedProgramPass):
    """A rewrite that looks at one node at a time: match a node, return its replacement or why it is skipped.

    A subclass names the ops it looks at in :attr:`targets` and implements
    :meth:`rewrite`. ``rewrite`` is called with the graph's insertion point before
    the node, so what it inserts (with :func:`insert_op`) comes before the node's
    users; the node returned replaces every use of the node. A rewrite of a small
    region returns a mapping instead (e.g. each piece of a split to its replacement;
    insert each before the node it replaces with ``graph.inserting_before``). Nodes
    left unused (the replaced nodes, what only they read) are dropped afterwards, and
    so are the constants the rewrite released that nothing reads any more.

    After the pass has run, :attr:`rewritten` names the replaced nodes and
    :attr:`skipped` pairs each skipped node's name with its reason; the reasons are
    logged at DEBUG, so ``audiodeploy -v`` shows why a node stayed as it was.
    """

    targets: ClassVar[frozenset[Any]] = frozenset()

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        self.rewritten: list[str] = []
        self.skipped: list[tuple[str, str]] = []
        self._released: list[torch.fx.Node] = []

    @property
    def graph(self) -> torch.fx.Graph:
        return self.exported_program.graph

    @functools.cached_property
    def constants(self) -> dict[torch.fx.Node, torch.Tensor]:
        """The program's constant placeholders and their values (:func:`constant_sources`) as the pass started."""
        return constant_sources(self.exported_program)

    def constant_value(self, node: torch.fx.Node) -> tuple[torch.Tensor, torch.fx.Node] | None:
        """The value of ``node`` if it is a constant or views of one (``codebook[None]``), and that constant (the one
        to :meth:`release_constant`); ``None`` otherwise."""
        *views, source = viewed_chain(node)
        if source not in self.constants:
            return None
        return evaluate(reversed(views), {source: self.constants[source]})[node], source

    def candidates(self) -> Iterable[torch.fx.Node]:
        """The nodes :meth:`rewrite` looks at, in that order: each call of an op of :attr:`targets`, in graph order.

        A pass whose match is found by looking at the whole graph first (the roots of the values computed from
        constants alone, say) overrides this instead of naming ops.
        """
        return [node for node in self.graph.nodes if node.op == "call_function" and node.target in self.targets]

    def rewrite(self, node: torch.fx.Node) -> Rewrite:
        raise NotImplementedError

    def finish(self) -> None:
        """Called once after a pass that rewrote something, before unused nodes are dropped."""

    def release_constant(self, constant: torch.fx.Node) -> None:
        """Drop ``constant`` after the pass unless something still reads it: its bytes would stay in the program."""
        self._released.append(constant)

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        log = logging.getLogger(type(self).__module__)
        erased: set[torch.fx.Node] = set()  # by a region's rewrite, after the loop took its list of nodes
        for node in list(self.candidates()):
            if node in erased:
                continue
            with graph_module.graph.inserting_before(node):
                result = self.rewrite(node)
            if isinstance(result, Skip):
                self.skipped.append((node.name, result.reason))
                log.debug("%s: %s left as it is: %s", type(self).__name__, node.name, result.reason)
                continue
            self.rewritten.append(node.name)
            replacements = result if isinstance(result, Mapping) else {node: result}
            for replaced, replacement in replacements.items():
                replace_node(self.exported_program, replaced, replacement)
                erased.add(replaced)
        if self.rewritten:
            self.finish()
            rewrite_done(self.exported_program)
        for constant in dict.fromkeys(self._released):
            if not constant.users:
                # to_edge drops unused parameters but keeps unused lifted constants, bytes and all.
                delete_constant_placeholder(self.exported_program, constant)
        if self._released:
            graph_module.recompile()
        return PassResult(graph_module, bool(self.rewritten))


RESHAPES = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})
"""The ops that give a tensor's elements another shape, in order."""


MOVES_ELEMENTS = frozenset(
    {
        aten.view.default,
        aten.reshape.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.permute.default,
        aten.transpose.int,
        aten.clone.default,
        aten.select.int,
        aten.slice.Tensor,
    }
)
"""Ops that only move (or select) elements of their first argument and read no other tensor: an elementwise op
such as a cast gives the same result before them as after."""


class EdgePaddingAsConcatPass(NodeRewritePass):
    """The shared form of the paddings that copy samples of the signal into its edges (reflect, replicate).

    A subclass names its :attr:`mode` and ops, says which samples its edges copy at a static length
    (:meth:`sliced_edges`), and gives the kernels that pick those samples out of a row of ones at a dynamic one
    (:meth:`edge_kernels`); this class matches the padding, checks it, and builds ``cat([left, x, right])`` with
    the edges either sliced or selected from the rows by one ``bmm`` with a one-hot selector ``S [1, T, l + r]``.
    The selector comes from a row of ones as long as the signal (a convolution with zero weights and a bias of one,
    so that it has the signal's dynamic length), cross-correlated with the kernels; one selector serves every
    padding of the same length and amounts.
    """

    mode: ClassVar[str] = ""
    """``aten.pad``'s mode that this pass rewrites."""

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        # Per symbolic length: the row of ones; per (length, l, r): the selector S.
        self._ones: dict[str, torch.fx.Node] = {}
        self._selectors: dict[tuple[str, int, int], torch.fx.Node] = {}

    def sliced_edges(
        self, x: torch.fx.Node, length: int, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right edges of ``x`` at a static ``length``, each a list of nodes to concatenate."""
        raise NotImplementedError

    def edge_kernels(self, left: int, right: int) -> tuple[torch.Tensor, int]:
        """``E [l + r, 1, K]`` and the zero padding P of the row of ones it is cross-correlated with: kernel ``j``
        is one at the sample that edge position ``j`` copies, and zero at every other sample."""
        raise NotImplementedError

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        padding = given["pad" if node.target == aten.pad.default else "padding"]
        if node.target == aten.pad.default and given["mode"] != self.mode:
            return Skip(f"not a {self.mode} padding")
        val = value(x)
        if val is None or val.dtype != torch.float32 or val.dim() < 2:
            return Skip("not a float32 tensor of two or more dimensions")
        if not (isinstance(padding, (list, tuple)) and len(padding) == 2 and all(isinstance(p, int) for p in padding)):
            return Skip("it pads more than the last dimension, or by symbolic amounts")
        left, right = padding
        if left < 0 or right < 0:
            return Skip("it crops (a negative padding)")
        if not all(is_static(size) for size in val.shape[:-1]):
            return Skip("a leading dimension is symbolic")
        if left == right == 0:
            return x
        length = val.shape[-1]
        if is_static(length):
            edges = self.sliced_edges(x, int(length), left, right, origin=node)
        else:
            edges = self._selected_edges(x, left, right, origin=node)
        return insert_op(self.graph, aten.cat.default, (edges[0] + [x] + edges[1], -1), origin=node)

    def _selected_edges(
        self, x: torch.fx.Node, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right padding selected from the rows of ``x`` by one matrix product."""
        leading = [int(size) for size in tensor_of(x).shape[:-1]]
        rows = math.prod(leading)
        matrix = x if leading == [1, rows] else insert_reshape(self.graph, x, [1, rows, -1], origin=origin)
        selector = self._selector(matrix, left, right, origin=origin)
        selected = insert_op(self.graph, aten.bmm.default, (matrix, selector), origin=origin)
        if leading != [1, rows]:
            selected = insert_reshape(self.graph, selected, [*leading, left + right], origin=origin)
        parts: list[list[torch.fx.Node]] = []
        for start, stop in ((0, left), (left, left + right)):
            if start == stop:
                parts.append([])
            else:
                parts.append([insert_op(self.graph, aten.slice.Tensor, (selected, -1, start, stop), origin=origin)])
        return parts[0], parts[1]

    def _selector(self, matrix: torch.fx.Node, left: int, right: int, *, origin: torch.fx.Node) -> torch.fx.Node:
        """``S [1, T, l + r]``: each edge position's one-hot column over the samples."""
        size: Any = tensor_of(matrix).shape[-1]
        key = str(size.node.expr) if isinstance(size, torch.SymInt) else str(size)
        if (key, left, right) in self._selectors:
            return self._selectors[key, left, right]
        ones = self._ones.get(key)
        if ones is None:
            rows = int(tensor_of(matrix).shape[1])
            zeros = torch.zeros(1, rows, 1)
            zeros_node = add_constant(self.exported_program, self.graph, f"{self.mode}_padding_zeros", zeros)
            one = add_constant(self.exported_program, self.graph, f"{self.mode}_padding_bias", torch.ones(1))
            ones = insert_op(self.graph, aten.conv1d.default, (matrix, zeros_node, one), origin=origin)
            self._ones[key] = ones
        kernels, pad = self.edge_kernels(left, right)
        weight = add_constant(self.exported_program, self.graph, f"{self.mode}_padding_selector", kernels)
        one_hot = insert_op(self.graph, aten.conv1d.default, (ones, weight, None, [1], [pad]), origin=origin)
        selector = insert_op(self.graph, aten.permute.default, (one_hot, [0, 2, 1]), origin=origin)
        self._selectors[key, left, right] = selector
        return selector


FLOAT32_EXACT_INTEGERS = 2**24
"""Every integer up to this magnitude is exact as a float32, and so is integer arithmetic that stays below it."""


FILL_VALUES: dict[Any, Callable[[dict[str, Any]], Any]] = {
    aten.zeros.default: lambda given: 0,
    aten.zeros_like.default: lambda given: 0,
    aten.new_zeros.default: lambda given: 0,
    aten.ones.default: lambda given: 1,
    aten.ones_like.default: lambda given: 1,
    aten.new_ones.default: lambda given: 1,
    aten.full.default: lambda given: given["fill_value"],
    aten.full_like.default: lambda given: given["fill_value"],
    aten.new_full.default: lambda given: given["fill_value"],
    aten.scalar_tensor.default: lambda given: given["s"],
}
"""Ops that fill a tensor with one number, and that number read from their arguments (:func:`arguments`) by name."""


def same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two (fake) tensors have the same sizes at every length, symbolic sizes compared without a guard."""
    return a.dim() == b.dim() and all(statically_known_true(m == n) for m, n in zip(a.shape, b.shape))


def same_value_type(a: Any, b: Any) -> bool:
    """Whether two (fake) tensors have one dtype and the same sizes at every length (see :func:`same_shape`)."""
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and same_shape(a, b)


def computed_at_sizes(node: torch.fx.Node, nodes: list[torch.fx.Node], at: Mapping[Any, int]) -> torch.Tensor:
    """``node`` computed with PyTorch from ``nodes`` (its computation, in graph order, sources included) with the size
    symbols at the values ``at``: a value computed from the length alone, at one length. A node outside ``nodes``
    that is read is a size (computed from ``at``) or a tensor read only for its shape (``full_like``: zeros)."""

    def concrete(size: Any) -> int:
        return int(sympy.sympify(size.node.expr if isinstance(size, torch.SymInt) else size).subs(at))

    values: dict[torch.fx.Node, Any] = {}

    def read(arg: torch.fx.Node) -> Any:
        if arg in values:
            return values[arg]
        val = arg.meta.get("val")
        if isinstance(val, (int, torch.SymInt)):  # a size (an expand's, an arange's end)
            return concrete(val)
        if not isinstance(val, torch.Tensor):
            raise ValueError(f"{arg.name} has no value to compute with")
        return torch.zeros([concrete(s) for s in val.shape], dtype=val.dtype)

    with torch.no_grad():
        for current in nodes:
            val = current.meta.get("val")
            if isinstance(val, (int, torch.SymInt)):
                values[current] = concrete(val)
            else:
                args, kwargs = torch.fx.map_arg((current.args, current.kwargs), read)
                values[current] = current.target(*args, **kwargs)
    return values[node]


Fact = TypeVar("Fact")


def analysis_of(
    node: torch.fx.Node,
    facts: dict[torch.fx.Node, Any],
    derive: Callable[[torch.fx.Node], Fact],
    failure: type[Exception],
) -> Fact:
    """What an analysis (``derive``) says of ``node``, memoized in ``facts``: every node it is computed from first,
    in graph order, so that ``derive`` of each reads its inputs' facts without recursion. A node whose ``derive``
    raised ``failure`` keeps that exception, raised again to whoever asks for it. A size (a ``sym_size`` or integer
    math on sizes) carries none of its tensor's data: the nodes it is computed from are not looked at."""
    if node not in facts:
        pending = ancestors([node], expand=lambda n: n not in facts and not is_size(n)) - facts.keys()
        order = {n: position for position, n in enumerate(node.graph.nodes)}
        for current in sorted(pending, key=order.__getitem__):
            try:
                facts[current] = derive(current)
            except failure as reason:
                facts[current] = reason
    known = facts[node]
    if isinstance(known, failure):
        raise known
    return known


def is_size(node: torch.fx.Node) -> bool:
    """A node holding a size (an integer, symbolic or not), not a tensor."""
    return isinstance(node.meta.get("val"), (int, torch.SymInt))


ARANGE_OPS = frozenset({aten.arange.default, aten.arange.start, aten.arange.start_step})
"""Positions: the ops that count from a start to an end."""
COMPARISON_OPS = {
    aten.ge.Scalar: "ge",
    aten.ge.Tensor: "ge",
    aten.gt.Scalar: "gt",
    aten.gt.Tensor: "gt",
    aten.le.Scalar: "le",
    aten.le.Tensor: "le",
    aten.lt.Scalar: "lt",
    aten.lt.Tensor: "lt",
    aten.eq.Scalar: "eq",
    aten.eq.Tensor: "eq",
    aten.ne.Scalar: "ne",
    aten.ne.Tensor: "ne",
}
"""Elementwise comparisons, each with its relation's name (``le`` is ``a <= b``)."""


MOST_LENGTHS_TRIED = 4096
"""Sizes of one symbol with at most this many values in the export's range are compared at each of them."""


def sizes_always(relation: Callable[[Any, Any], Any], a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """Whether ``relation(a, b)`` holds for every length the export allows.

    Sympy proves it for most sizes; two floor divisions of one length (``(T - 1) // 2`` and ``(T - 3) // 2 + 1``,
    equal for every T) it cannot relate, and those are compared at each length of the range where it is short.
    The shape environment's own knowledge is not asked (``statically_known_true``): after an export that takes a
    ``min`` of two lengths, its axioms hold both ``Eq(Min(a, b), b)`` and ``Ne(Min(a, b), b)``, so it "knows" either.
    """
    expressions = [x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(x) for x in (a, b)]
    if relation(*expressions) in (True, sympy.true):  # eq compares structurally, the others give a relation
        return True
    symbols = set().union(*(e.free_symbols for e in expressions))
    if len(symbols) != 1:
        return False
    (symbol,) = symbols
    shape_env = next(x.node.shape_env for x in (a, b) if isinstance(x, torch.SymInt))
    span = shape_env.var_to_range.get(symbol)
    if span is None or not (is_finite_bound(span.lower) and is_finite_bound(span.upper)):
        return False
    low, high = int(span.lower), int(span.upper)
    if high - low >= MOST_LENGTHS_TRIED:
        return False
    return all(
        bool(relation(*(e.xreplace({symbol: sympy.Integer(n)}) for e in expressions))) for n in range(low, high + 1)
    )


METADATA_CHECKS = frozenset({aten._assert_tensor_metadata.default})
"""The dtype and size checks export leaves on a tensor: a rewrite that no longer computes the tensor drops them."""


def length_range(ep: ExportedProgram, size: int | torch.SymInt) -> tuple[sympy.Symbol, int, int] | Skip:
    """The symbol of a size computed from one symbol, and that symbol's least and greatest value in the export's
    range; else why not (a fixed size, several symbols, an open range)."""
    symbols = size.node.expr.free_symbols if isinstance(size, torch.SymInt) else set()
    if len(symbols) != 1:
        return Skip("its length is not a size of one symbol")
    (symbol,) = symbols
    bounds = ep.range_constraints.get(symbol)
    if bounds is None or not (is_finite_bound(bounds.lower) and is_finite_bound(bounds.upper)):
        return Skip(f"{symbol} has no finite range")
    return symbol, int(bounds.lower), int(bounds.upper)


def is_finite_bound(bound: sympy.Expr) -> bool:
    """Whether a range's bound is a number: torch writes an open end as its own ``int_oo``, which sympy calls finite."""
    return bool(bound.is_Integer) and bound not in (int_oo, -int_oo)


def size_ranges(ep: ExportedProgram) -> dict[sympy.Symbol, ValueRanges]:
    """The range of each size symbol in the export's constraints (which also key some expressions)."""
    return {symbol: bounds for symbol, bounds in ep.range_constraints.items() if isinstance(symbol, sympy.Symbol)}


OPEN_RANGE_CHECKED_UP_TO = 64
"""How far past its least value a size with no greatest one is checked."""


def sizes_at_range_ends(ranges: Mapping[sympy.Symbol, ValueRanges]) -> dict[str, dict[sympy.Symbol, int]]:
    """Where a value computed from sizes alone is checked by computing it, named for a message: every symbol at its
    least, then at its greatest value (its least plus :data:`OPEN_RANGE_CHECKED_UP_TO` where the range is open);
    the one length of a program without symbols."""
    if not ranges:
        return {"its one length": {}}
    shortest = {symbol: int(bounds.lower) for symbol, bounds in ranges.items()}
    longest = {
        symbol: int(bounds.upper) if is_finite_bound(bounds.upper) else shortest[symbol] + OPEN_RANGE_CHECKED_UP_TO
        for symbol, bounds in ranges.items()
    }
    return {"the shortest length": shortest, "the longest": longest}


@dataclass(frozen=True)
class FeatureSlice:
    """``x[..., start:end:step]``: a slice of a float32 tensor's static last dimension with integer bounds."""

    x: torch.fx.Node
    start: int
    end: int
    step: int

    @property
    def features(self) -> range:
        """The input features it takes, in order."""
        return range(self.start, self.end, self.step)


def feature_slice(node: object) -> FeatureSlice | Skip:
    """``node`` as a :class:`FeatureSlice`, or why it is not one."""
    if not isinstance(node, torch.fx.Node) or node.target != aten.slice.Tensor:
        return Skip("not a slice")
    given = arguments(node)
    x_val = value(given["input"])
    if x_val is None or x_val.dtype != torch.float32:
        return Skip("it slices no float32 tensor")
    if given["dim"] % x_val.dim() != x_val.dim() - 1:
        return Skip("it slices another dimension than the last")
    width = x_val.shape[-1]
    if not isinstance(width, int):
        return Skip("the last dimension's size is symbolic")
    start, end, step = given["start"], given["end"], given["step"]
    if not all(isinstance(bound, (int, type(None))) for bound in (start, end)) or not isinstance(step, int):
        return Skip("its bounds are symbolic")
    start, end, step = slice(start, end, step).indices(width)
    if not range(start, end, step):
        return Skip("it is empty")
    return FeatureSlice(given["input"], start, end, step)


def selection_weight(picked: Sequence[tuple[int, float]], width: int) -> torch.Tensor:
    """A linear's weight ``[len(picked), width]`` whose row ``j`` takes input feature ``picked[j][0]`` times
    ``picked[j][1]`` (a sign) and nothing else."""
    weight = torch.zeros(len(picked), width)
    for row, (feature, sign) in enumerate(picked):
        weight[row, feature] = sign
    return weight
