"""What a lowering did: delegates, ops left outside them, folds, and declined GEMMs."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

import torch
from torch.export import ExportedProgram

from audiodeploy.lowering.passes.fold_computed_gemm_weights import GEMM_STATIC_SLOTS, gemm_label

_DELEGATE_CALL = torch.ops.higher_order.executorch_call_delegate
# Edge-dialect names of the GEMMs XNNPACK can delegate.
_GEMM_OPS = {f"aten.{packet.__name__}" for packet in GEMM_STATIC_SLOTS} | {"aten.bmm"}


@dataclass(frozen=True)
class Fold:
    gemm: str
    """``op @ module.path`` of the GEMM whose weight or bias was folded."""
    sources: tuple[str, ...]
    """The parameters and buffers the computation read, now gone from the program."""
    constants: tuple[str, ...]
    """Names of the folded constants that went into the delegate."""
    bytes_freed: int
    bytes_written: int


@dataclass(frozen=True)
class NotFolded:
    gemm: str
    reason: str


@dataclass(frozen=True)
class DeclinedGemm:
    gemm: str
    node: str
    reason: str


@dataclass(frozen=True)
class MethodReport:
    name: str
    delegates: int
    ops_outside_delegates: dict[str, int]
    folds: tuple[Fold, ...] = ()
    not_folded: tuple[NotFolded, ...] = ()
    gemms_not_delegated: tuple[DeclinedGemm, ...] = ()
    rewrites: tuple[str, ...] = ()
    """The graph rewrites (pass class names) that changed this method before partitioning."""

    @property
    def bytes_freed(self) -> int:
        return sum(f.bytes_freed for f in self.folds)

    @property
    def bytes_written(self) -> int:
        return sum(f.bytes_written for f in self.folds)


@dataclass(frozen=True)
class LoweringReport:
    fold: bool
    """Whether computed GEMM weights were folded (False: stock ExecuTorch lowering)."""
    pte_bytes: int
    methods: dict[str, MethodReport] = field(default_factory=dict)
    rewrite: bool = False
    """Whether the graph was rewritten for XNNPACK before partitioning (False: as exported)."""

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict) -> "LoweringReport":
        methods = {
            name: MethodReport(
                name=m["name"],
                delegates=m["delegates"],
                ops_outside_delegates=dict(m["ops_outside_delegates"]),
                folds=tuple(Fold(**{**f, "sources": tuple(f["sources"]), "constants": tuple(f["constants"])}) for f in m["folds"]),
                not_folded=tuple(NotFolded(**n) for n in m["not_folded"]),
                gemms_not_delegated=tuple(DeclinedGemm(**g) for g in m["gemms_not_delegated"]),
                rewrites=tuple(m.get("rewrites", ())),
            )
            for name, m in data["methods"].items()
        }
        return cls(fold=data["fold"], pte_bytes=data["pte_bytes"], methods=methods, rewrite=data.get("rewrite", False))

    def __str__(self) -> str:
        steps = [
            step
            for step, on in (("graph rewritten for XNNPACK", self.rewrite), ("computed GEMM weights folded", self.fold))
            if on
        ]
        lowering = f"audiodeploy ({'; '.join(steps)})" if steps else "stock ExecuTorch"
        lines = [f"lowering: {lowering}; program size {_size(self.pte_bytes)}"]
        for method in self.methods.values():
            outside = ", ".join(f"{op} x{n}" for op, n in method.ops_outside_delegates.items()) or "none"
            lines.append(f"method {method.name}: {method.delegates} XNNPACK delegate(s); ops outside delegates: {outside}")
            if method.rewrites:
                lines.append(f"  rewritten by: {', '.join(method.rewrites)}")
            if method.folds:
                lines.append(
                    f"  folded {len(method.folds)} computed weight(s): freed {_size(method.bytes_freed)}, "
                    f"wrote {_size(method.bytes_written)}"
                )
                lines.extend(f"    {f.gemm} <- {', '.join(f.sources)}" for f in method.folds)
            lines.extend(f"  not folded: {n.gemm}: {n.reason}" for n in method.not_folded)
            lines.extend(f"  GEMM not delegated: {g.gemm}: {g.reason}" for g in method.gemms_not_delegated)
        return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


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
) -> MethodReport:
    """Summarize one method of an edge program after ``to_backend``."""
    delegates = 0
    outside: Counter[str] = Counter()
    declined = []
    for node in lowered.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is _DELEGATE_CALL:
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
    )
