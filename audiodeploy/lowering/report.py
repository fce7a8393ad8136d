"""What a lowering did, read off its programs: the records of :mod:`audiodeploy.program.report`, made from the
lowered edge program of each method."""

from __future__ import annotations

from collections import Counter

import torch
from torch.export import ExportedProgram

from audiodeploy.lowering.passes._gemms import GEMM_STATIC_SLOTS, gemm_label
from audiodeploy.lowering.passes._graph import input_sizes
from audiodeploy.program.report import (
    DeclinedGemm,
    DelegatedGemm,
    Fold,
    MethodReport,
    NotFolded,
    SkippedRewrite,
)
from audiodeploy.program.sizes import SizeTree, to_tree

_DELEGATE_CALL = torch.ops.higher_order.executorch_call_delegate
# Edge-dialect names of the GEMMs XNNPACK can delegate.
_GEMM_OPS = {f"aten.{packet.__name__}" for packet in GEMM_STATIC_SLOTS} | {"aten.bmm"}


def op_name(node: torch.fx.Node) -> str:
    """``aten.convolution`` for an edge op node (overload dropped)."""
    name = getattr(node.target, "__name__", str(node.target))
    if "::" in name or "." not in name:
        return name
    parts = name.split(".")
    return ".".join(parts[:-1]) if len(parts) > 2 else name


def describe_lowered_method(
    name: str,
    lowered: ExportedProgram,
    decline_reasons: dict[str, list[str]],
    folds: tuple[Fold, ...],
    not_folded: tuple[NotFolded, ...],
    rewrites: tuple[str, ...] = (),
    skipped_rewrites: tuple[SkippedRewrite, ...] = (),
) -> MethodReport:
    """Summarize one method of an edge program after ``to_backend``."""
    delegates = 0
    outside: Counter[str] = Counter()
    declined = []
    delegated_gemms: list[DelegatedGemm] = []
    for node in lowered.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is _DELEGATE_CALL:
            delegate = getattr(lowered.graph_module, node.args[0].target).original_module
            delegated_gemms.extend(_delegated_gemms(delegate, delegates))
            delegates += 1
            continue
        if node.target.__module__ == "_operator":  # getitem unpacking a delegate's outputs
            continue
        op = op_name(node)
        outside[op] += 1
        if op in _GEMM_OPS:
            reasons = decline_reasons.get(node.name) or ["XNNPACK gave no reason"]
            declined.append(DeclinedGemm(gemm_label(node), node.name, "; ".join(reasons)))
    return MethodReport(
        name=name,
        delegates=delegates,
        ops_outside_delegates=dict(sorted(outside.items(), key=lambda kv: (-kv[1], kv[0]))),
        folds=folds,
        not_folded=not_folded,
        gemms_not_delegated=tuple(declined),
        rewrites=rewrites,
        skipped_rewrites=skipped_rewrites,
        delegated_gemms=tuple(delegated_gemms),
        size_symbols=_size_symbols(lowered),
    )


def _delegated_gemms(delegate: ExportedProgram, index: int) -> list[DelegatedGemm]:
    """The GEMMs of one delegate's graph, in its order: XNNPACK defines one operator per node, in this order."""
    return [
        DelegatedGemm(index, gemm_label(node), gemm_flops(node))
        for node in delegate.graph.nodes
        if node.op == "call_function" and op_name(node) in _GEMM_OPS
    ]


def gemm_flops(node: torch.fx.Node) -> SizeTree | None:
    """2 x the multiply-adds of a GEMM node, as a size expression; None where its sizes are not known."""
    import sympy

    op = op_name(node)
    if op == "aten.convolution":
        weight = _value(node.args[1])
        if weight is None:
            return None
        if node.args[6]:  # transposed, weight [in, out/groups, *kernel]: each input element feeds out/groups x kernel
            elements, per_element = _value(node.args[0]), [weight.shape[1], *weight.shape[2:]]
        else:  # each output element takes in/groups x kernel
            elements, per_element = node.meta.get("val"), list(weight.shape[1:])
    else:
        first = _value(node.args[1] if op == "aten.addmm" else node.args[0])
        if first is None:
            return None
        elements, per_element = node.meta.get("val"), [first.shape[-1]]
    if not isinstance(elements, torch.Tensor):
        return None
    factors = [
        size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))
        for size in (*elements.shape, *per_element)
    ]
    return to_tree(sympy.Mul(2, *factors))


def _value(argument: object) -> torch.Tensor | None:
    value = argument.meta.get("val") if isinstance(argument, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _size_symbols(program: ExportedProgram) -> dict[str, tuple[int, int, int, int]]:
    """Where a size expression reads each size symbol: an input dimension of size ``a * symbol + b``, as (input
    index, dimension, a, b)."""
    return {str(symbol): (at.index, at.dim, at.a, at.b) for symbol, at in input_sizes(program).items()}
