"""What a lowering did, as the sidecar records it: delegates, ops left outside them, folds, declined GEMMs, and the
int8 or fp16 fidelity. Plain records that read and describe themselves, so that ``audiodeploy inspect`` shows a
program's report without importing torch or the lowering core (which builds them: :mod:`audiodeploy.lowering.report`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from audiodeploy.program.sizes import SizeTree


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
class SkippedRewrite:
    """Nodes a graph rewrite looked at and left as they were, for one reason."""

    rewrite: str
    """The pass's class name."""
    reason: str
    nodes: tuple[str, ...]
    """The nodes' names in the exported program."""


@dataclass(frozen=True)
class DelegatedGemm:
    """A GEMM inside a delegate, in the order XNNPACK runs them: what a profile attributes time and FLOPs to."""

    delegate: int
    """Which delegate call of the method holds it, in the order they run (0 first)."""
    gemm: str
    """``op @ module.path``."""
    flops: SizeTree | None
    """Its floating-point operations (2 per multiply-add) as an expression of the method's input sizes
    (:mod:`audiodeploy.program.sizes`, with :attr:`MethodReport.size_symbols`); None if not written there."""


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
    skipped_rewrites: tuple[SkippedRewrite, ...] = ()
    """What each rewrite looked at and left as it was, grouped by rewrite and reason."""
    delegated_gemms: tuple[DelegatedGemm, ...] = ()
    """Every GEMM in a delegate, in the order they run. Added later: older reports lack it."""
    size_symbols: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    """Each size symbol of :attr:`DelegatedGemm.flops` as (input index, dimension, a, b): that input dimension's
    size is ``a * symbol + b`` (:data:`audiodeploy.program.sizes.SizeSymbols`)."""

    @property
    def bytes_freed(self) -> int:
        return sum(f.bytes_freed for f in self.folds)

    @property
    def bytes_written(self) -> int:
        return sum(f.bytes_written for f in self.folds)


@dataclass(frozen=True)
class Fp32Gemm:
    gemm: str
    reason: str


@dataclass(frozen=True)
class GemmSensitivity:
    gemm: str
    """``op @ module.path``; the path is what a ``keep_fp32`` pattern matches."""
    snr_db: float
    """Output SNR against fp32 when this GEMM alone is int8 (simulated in PyTorch): lower is more sensitive."""


SENSITIVE_SHOWN = 5
"""How many of the most sensitive GEMMs the report prints (``-v``: all of them)."""


@dataclass(frozen=True)
class QuantizedMethod:
    name: str
    quantized_gemms: tuple[str, ...] = ()
    """``op @ module.path`` of each GEMM with int8 weights."""
    fp32_gemms: tuple[Fp32Gemm, ...] = ()
    """GEMMs on constant weights left in fp32, each with its reason."""
    fidelity: dict[str, float] = field(default_factory=dict)
    """Measure name -> value against fp32 eager (e.g. ``snr_db``, ``max_abs_diff``), over every fidelity input."""
    sensitivity: tuple[GemmSensitivity, ...] = ()
    """Each GEMM quantized alone, most sensitive first; empty if not measured (it is with
    ``lower(..., options=LoweringOptions(quantization=Quantization(scheme, sensitivity=True)))``)."""


@dataclass(frozen=True)
class QuantizationReport:
    scheme: str
    """``int8-dynamic`` or ``int8-static``."""
    calibration: str
    """Where static activation ranges came from (``"4 generated signals"``, ``"8 given inputs"``, ``"none (dynamic)"``)."""
    keep_fp32: tuple[str, ...] = ()
    """The module-name patterns kept in fp32."""
    fidelity_inputs: str = ""
    """What the fidelity was measured on (never the calibration inputs)."""
    methods: dict[str, QuantizedMethod] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    """One line each: what makes this program less faithful than asked (fidelity under its floor)."""

    @classmethod
    def from_dict(cls, data: dict) -> QuantizationReport:
        methods = {
            name: QuantizedMethod(
                name=m["name"],
                quantized_gemms=tuple(m.get("quantized_gemms", ())),
                fp32_gemms=tuple(Fp32Gemm(**g) for g in m.get("fp32_gemms", ())),
                fidelity={k: float(v) for k, v in m.get("fidelity", {}).items()},
                sensitivity=tuple(GemmSensitivity(g["gemm"], float(g["snr_db"])) for g in m.get("sensitivity", ())),
            )
            for name, m in data.get("methods", {}).items()
        }
        return cls(
            scheme=data["scheme"],
            calibration=data["calibration"],
            keep_fp32=tuple(data.get("keep_fp32", ())),
            fidelity_inputs=data.get("fidelity_inputs", ""),
            methods=methods,
            warnings=tuple(str(w) for w in data.get("warnings", ())),
        )

    def describe_lines(self, verbose: bool = False) -> list[str]:
        kept = f"; kept fp32: {', '.join(self.keep_fp32)}" if self.keep_fp32 else ""
        lines = [f"quantization: {self.scheme}; calibration: {self.calibration}{kept}"]
        for method in self.methods.values():
            fidelity = ", ".join(f"{k} {v:.4g}" for k, v in method.fidelity.items())
            lines.append(
                f"  method {method.name}: {len(method.quantized_gemms)} int8 GEMM(s), {len(method.fp32_gemms)} fp32"
                + (f"; vs fp32 eager on {self.fidelity_inputs}: {fidelity}" if fidelity else "")
            )
            by_reason: dict[str, list[str]] = {}
            for g in method.fp32_gemms:
                by_reason.setdefault(g.reason, []).append(g.gemm)
            lines.extend(
                f"  fp32: {gemms[0]}{f' and {len(gemms) - 1} more' if len(gemms) > 1 else ''}: {reason}"
                for reason, gemms in by_reason.items()
            )
            if method.sensitivity:
                shown = method.sensitivity if verbose else method.sensitivity[:SENSITIVE_SHOWN]
                rest = len(method.sensitivity) - len(shown)
                lines.append(
                    "  most sensitive, each GEMM alone in int8 (output SNR vs fp32; keep the worst with --keep-fp32):"
                )
                lines.extend(f"    {g.snr_db:6.1f} dB  {g.gemm}" for g in shown)
                if rest:
                    lines.append(f"    and {rest} more (-v shows them all)")
        lines.extend(f"  warning: {warning}" for warning in self.warnings)
        return lines


@dataclass(frozen=True)
class PrecisionReport:
    """An fp16 program: how close it stays to fp32 eager."""

    dtype: str
    """``float16``: weights, activations and arithmetic (inputs and outputs stay float32)."""
    fidelity_inputs: str
    fidelity: dict[str, dict[str, float]] = field(default_factory=dict)
    """Method -> measure name -> value against fp32 eager (``snr_db``, ``max_abs_diff``, ...)."""

    @classmethod
    def from_dict(cls, data: dict) -> PrecisionReport:
        return cls(
            dtype=str(data["dtype"]),
            fidelity_inputs=str(data.get("fidelity_inputs", "")),
            fidelity={m: {k: float(v) for k, v in f.items()} for m, f in data.get("fidelity", {}).items()},
        )

    def describe_lines(self) -> list[str]:
        lines = [f"precision: {self.dtype} (folded in fp32, stored and computed in {self.dtype}; float32 in and out)"]
        for method in self.fidelity:
            lines.append(f"  method {method}: vs fp32 eager on {self.fidelity_inputs}: {self.measures(method)}")
        return lines

    def measures(self, method: str) -> str:
        """``method``'s measures against fp32 eager as one phrase: ``snr_db 58.5, max_abs_diff 0.0021``."""
        return ", ".join(f"{k} {v:.4g}" for k, v in self.fidelity.get(method, {}).items())


@dataclass(frozen=True)
class LoweringReport:
    fold: bool
    """Whether computed GEMM weights were folded (False: stock ExecuTorch lowering)."""
    pte_bytes: int
    methods: dict[str, MethodReport] = field(default_factory=dict)
    rewrite: bool = False
    """Whether the graph was rewritten for XNNPACK before partitioning (False: as exported)."""
    quantization: QuantizationReport | None = None
    """How the program was quantized and how close it stays to fp32; None for an fp32 program."""
    precision: PrecisionReport | None = None
    """An fp16 program's precision and fidelity; None for fp32 and int8 programs."""

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict) -> LoweringReport:
        methods = {
            name: MethodReport(
                name=m["name"],
                delegates=m["delegates"],
                ops_outside_delegates=dict(m["ops_outside_delegates"]),
                folds=tuple(
                    Fold(**{**f, "sources": tuple(f["sources"]), "constants": tuple(f["constants"])})
                    for f in m["folds"]
                ),
                not_folded=tuple(NotFolded(**n) for n in m["not_folded"]),
                gemms_not_delegated=tuple(DeclinedGemm(**g) for g in m["gemms_not_delegated"]),
                rewrites=tuple(m.get("rewrites", ())),
                skipped_rewrites=tuple(
                    SkippedRewrite(s["rewrite"], s["reason"], tuple(s["nodes"])) for s in m.get("skipped_rewrites", ())
                ),
                delegated_gemms=tuple(
                    DelegatedGemm(int(g["delegate"]), str(g["gemm"]), g["flops"]) for g in m.get("delegated_gemms", ())
                ),
                size_symbols={
                    str(symbol): (int(at[0]), int(at[1]), int(at[2]), int(at[3]))
                    for symbol, at in m.get("size_symbols", {}).items()
                },
            )
            for name, m in data["methods"].items()
        }
        quantization, precision = data.get("quantization"), data.get("precision")
        return cls(
            fold=data["fold"],
            pte_bytes=data["pte_bytes"],
            methods=methods,
            rewrite=data.get("rewrite", False),
            quantization=QuantizationReport.from_dict(quantization) if quantization else None,
            precision=PrecisionReport.from_dict(precision) if precision else None,
        )

    def __str__(self) -> str:
        return self.describe()

    def describe(self, verbose: bool = False) -> str:
        """Delegates and ops outside them per method, folds in one line, and what was not folded or not delegated,
        grouped by reason; `verbose` lists every fold and every refused GEMM instead."""
        steps = [
            step
            for step, on in (("graph rewritten for XNNPACK", self.rewrite), ("computed GEMM weights folded", self.fold))
            if on
        ]
        lowering = f"audiodeploy ({'; '.join(steps)})" if steps else "stock ExecuTorch"
        lines = [f"lowering: {lowering}; program size {_size(self.pte_bytes)}"]
        for method in self.methods.values():
            outside = ", ".join(f"{op} x{n}" for op, n in method.ops_outside_delegates.items()) or "none"
            lines.append(
                f"method {method.name}: {method.delegates} XNNPACK delegate(s); ops outside delegates: {outside}"
            )
            if method.rewrites:
                lines.append(f"  rewritten by: {', '.join(method.rewrites)}")
            if verbose:
                lines.extend(f"  left by {s.rewrite}: {_some(s.nodes)}: {s.reason}" for s in method.skipped_rewrites)
            if method.folds:
                lines.append(
                    f"  folded {len(method.folds)} computed weight(s): freed {_size(method.bytes_freed)}, "
                    f"wrote {_size(method.bytes_written)}"
                )
                if verbose:
                    lines.extend(f"    {f.gemm} <- {', '.join(f.sources)}" for f in method.folds)
            lines.extend(_refusals("not folded", [(n.gemm, n.reason) for n in method.not_folded], verbose))
            lines.extend(
                _refusals("GEMM not delegated", [(g.gemm, g.reason) for g in method.gemms_not_delegated], verbose)
            )
        if self.quantization is not None:
            lines.extend(self.quantization.describe_lines(verbose))
        if self.precision is not None:
            lines.extend(self.precision.describe_lines())
        return "\n".join(lines)


def _some(names: tuple[str, ...]) -> str:
    return (
        names[0]
        if len(names) == 1
        else f"{len(names)} nodes ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
    )


def _refusals(what: str, refused: list[tuple[str, str]], verbose: bool) -> list[str]:
    """One line per refused GEMM when `verbose`, else one line per reason: its GEMM, or how many and the first."""
    if verbose:
        return [f"  {what}: {gemm}: {reason}" for gemm, reason in refused]
    by_reason: dict[str, list[str]] = {}
    for gemm, reason in refused:
        by_reason.setdefault(reason, []).append(gemm)
    return [
        f"  {what}: {gemms[0]}: {reason}"
        if len(gemms) == 1
        else f"  {what}: {len(gemms)} GEMMs ({gemms[0]}, ...): {reason}"
        for reason, gemms in by_reason.items()
    ]


def _size(n: int) -> str:
    amount = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError
