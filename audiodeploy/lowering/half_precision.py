"""fp16 programs: fold in fp32, then store and compute in fp16, with fp32 inputs and outputs.

XNNPACK runs fp16 natively on arm64 phones (ARMv8.2 FP16 arithmetic) and on x86 with AVX512-FP16; elsewhere it
converts around fp32 arithmetic. :func:`as_float16` takes a method's program after its rewrites and folds, so that
every computed weight was computed in fp32 and is only stored in fp16, and gives the program that:

- takes and returns float32 tensors, as the fp32 program does (the runtime and the sidecar do not change): its
  first op casts each float32 input to fp16, its last casts each fp16 output back;
- holds every float32 parameter, buffer and constant in fp16, with values beyond fp16's range (65504) clamped to
  it: masks filled with float32's largest value stay masks (``0 * inf`` would be NaN where they allow);
- creates, casts to and asserts fp16 where it did float32 (``torch.float32`` arguments), and computes with fp16
  where integer values meet float scalars (re-exported with fp16 as torch's default dtype);
- computes the erf GELU in its tanh form (:class:`TanhGeluAsTanhPass`): ExecuTorch 1.5.1's XNNPACK partitioner
  declines an fp16 ``gelu``, which would cut the delegate at every activation. The tanh form is at most 2e-4 from
  the erf GELU (near ``x = -2``); fp16 rounding moves a whole program's outputs by about ten times that;
- reduces no square directly (:class:`ReducedSquaresAsNegatedProductsPass`): XNNPACK fuses such a reduction into an
  operator it has no fp16 kernel for, and would run everything after that operator in fp32;
- cuts with ``slice_copy`` where it sliced (see :func:`as_float16`);
- decomposes, while still fp32, the ops whose decompositions compute fp16 in fp32 (:data:`UPCASTING_DECOMPOSITIONS`:
  ``baddbmm``, which `nn.MultiheadAttention` computes its scores with, ``silu``, ...): decomposed by edge lowering
  in the fp16 program, each would leave two casts outside the delegate, which they cut (transformers' WavLM: five
  delegates).

The program is exported again from its unlifted module (`torch.export.export`), with the method's own example
inputs and dynamic shapes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch._decomp import get_decompositions
from torch.export import ExportedProgram

from audiodeploy.lowering.passes.reduced_squares_as_negated_products import ReducedSquaresAsNegatedProductsPass
from audiodeploy.lowering.passes.tanh_gelu_as_tanh import TanhGeluAsTanhPass

FLOAT16_MAX = float(torch.finfo(torch.float16).max)

aten = torch.ops.aten

UPCASTING_DECOMPOSITIONS = (
    aten.baddbmm.default,
    aten.hardsigmoid.default,
    aten.hardswish.default,
    aten.mv.default,
    aten.silu.default,
)
"""Ops whose torch decompositions cast fp16 operands to fp32 and the result back (``pw_cast_for_opmath``)."""


def as_float16(ep: ExportedProgram, example_inputs: tuple[object, ...], dynamic_shapes: object) -> ExportedProgram:
    """The fp16 program of ``ep`` (a method after its rewrites and folds), as the module docstring says; ``ep``'s
    GELUs and reduced squares are rewritten in place (in forms that a second call leaves as they are)."""
    _gelu_in_tanh_form(ep)
    ReducedSquaresAsNegatedProductsPass(ep)(ep.graph_module)
    module = _with_upcasting_ops_decomposed(ep).module()
    graph = module.graph
    for node in list(graph.nodes):
        if node.op == "get_attr":
            _store_in_float16(module, str(node.target))
        elif node.op == "call_function":
            if node.target is aten.slice.Tensor:
                # The same cut as a copy (edge lowering writes every slice as one anyway). Traced again, the view of
                # a constant stored at the longest length (``c[:, :t, :t]``) is contiguous only at that length, and
                # torch records ``t != longest`` while it works out the view's strides: a guard that the range
                # violates. A copy's strides are its own.
                node.target = aten.slice_copy.Tensor
            node.args = tuple(_in_float16(a) for a in node.args)
            node.kwargs = {k: _in_float16(v) for k, v in node.kwargs.items()}
    for node in [n for n in graph.nodes if n.op == "placeholder"]:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            with graph.inserting_after(node):
                cast = graph.call_function(torch.ops.aten._to_copy.default, (node,), {"dtype": torch.float16})
            node.replace_all_uses_with(cast, delete_user_cb=lambda user, cast=cast: user is not cast)
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        output.args = (torch.fx.node.map_arg(output.args[0], lambda n: _back_to_float32(graph, n)),)
    graph.lint()
    module.recompile()
    with default_dtype(torch.float16):
        return torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)


def _gelu_in_tanh_form(ep: ExportedProgram) -> None:
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.gelu.default:
            node.kwargs = {**node.kwargs, "approximate": "tanh"}
    TanhGeluAsTanhPass(ep)(ep.graph_module)


def _with_upcasting_ops_decomposed(ep: ExportedProgram) -> ExportedProgram:
    found = {n.target for n in ep.graph.nodes if n.op == "call_function"} & set(UPCASTING_DECOMPOSITIONS)
    if not found:
        return ep
    return ep.run_decompositions(get_decompositions(list(found)))


def _store_in_float16(module: torch.nn.Module, target: str) -> None:
    owner_path, _, name = target.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    tensor = getattr(owner, name, None)
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
        return
    half = tensor.detach().clamp(-FLOAT16_MAX, FLOAT16_MAX).to(torch.float16)
    if isinstance(tensor, torch.nn.Parameter):
        setattr(owner, name, torch.nn.Parameter(half, requires_grad=False))
    elif name in getattr(owner, "_buffers", {}):
        owner._buffers[name] = half
    else:
        setattr(owner, name, half)


def _in_float16(argument: object) -> object:
    """An op's argument as the fp16 program gives it: ``torch.float32`` (a dtype to create, cast to or assert) as
    ``torch.float16``, and a float scalar beyond fp16's range (not an infinity) as fp16's largest of its sign."""
    if argument is torch.float32:
        return torch.float16
    if isinstance(argument, float) and abs(argument) > FLOAT16_MAX and argument not in (float("inf"), float("-inf")):
        return FLOAT16_MAX if argument > 0 else -FLOAT16_MAX
    if isinstance(argument, (list, tuple)):
        return type(argument)(_in_float16(a) for a in argument)
    return argument


def _back_to_float32(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
        return node
    return graph.call_function(torch.ops.aten._to_copy.default, (node,), {"dtype": torch.float32})


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default dtype is ``dtype`` inside the block."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
