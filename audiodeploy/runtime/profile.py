"""Where a program's time goes: per XNNPACK operator kind, per layer, and the rate of each GEMM kind.

ExecuTorch 1.5.1's wheel builds its runtime with the event tracer and XNNPACK's operator profiling: a program
loaded with ETDump enabled records, per run, each XNNPACK operator's time (to the microsecond), each delegate
call and each kernel run outside the delegates. `profile_program` runs a program so, reads the ETDump with
ExecuTorch's own reader, and sums it:

- per operator kind (``Fully Connected (NC, F32) GEMM``, ``Softmax (NC, F32)``, a kernel outside the delegates),
  its time in the median run (the run whose total is the median: its parts add up to it) and its share of it;
- per layer, when the lowering report lists the delegated GEMMs (:attr:`MethodReport.delegated_gemms`, in the
  sidecar). XNNPACK names operators, not graph nodes, and ExecuTorch's XNNPACK backend writes no map between them;
  but it defines one operator per graph node in the graph's order and never merges GEMMs, so the n-th GEMM
  operator of a delegate is its n-th GEMM node. Each GEMM's time goes to its module's layer, and each other
  operator's to the layer of the GEMM before it (the first GEMM's, before any). A delegate whose GEMM count differs
  from the report's gets no layers, and the profile says so;
- each GEMM kind's GFLOP/s, from the FLOPs the report writes as expressions of the input sizes.

A profiled run is slower than a plain one (the tracer records each operator): time with plain runs, and read the
profile for shares. torch is imported where a program runs: the records read without it.
"""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audiodeploy.program.records import Record
from audiodeploy.program.sizes import SizeSymbols, evaluate, symbol_values

if TYPE_CHECKING:
    import torch

GEMM_KINDS = ("GEMM", "Convolution", "Deconvolution")
"""Words of XNNPACK's operator names that mark a GEMM: its GEMMs (fully connected, batch matrix multiply) end in
``GEMM``, and its convolutions are GEMMs too (IGEMM, GEMM, depthwise)."""

SETUP = "delegate call outside its operators"
"""The part of each delegate call its operators do not account for: reshaping, and copying inputs and outputs."""


@dataclass(frozen=True, kw_only=True)
class OperatorTime(Record):
    """One operator kind, or one layer: its time per run."""

    name: str
    calls: int
    """Operators of this kind (in this layer) per run."""
    ms: float
    """Its total time in the median profiled run."""
    share: float
    """``ms`` / that run's time."""
    gflops: float | None = None
    """Its GEMMs' FLOPs / ``ms``, in GFLOP/s; None without GEMMs or without their FLOPs."""


@dataclass(frozen=True, kw_only=True)
class Profile(Record):
    """Where one program's (or ONNX Runtime session's) time went on one input."""

    engine: str
    """``executorch`` (ETDump) or ``onnxruntime`` (its own profiler)."""
    runs: int
    median_ms: float
    """The median profiled run, whose operators the profile lists."""
    operators: tuple[OperatorTime, ...]
    """Per operator kind, most time first."""
    layers: tuple[OperatorTime, ...] = ()
    """Per layer in program order; empty when the program's GEMMs are not known (no lowering report)."""
    gemm_gflops: float | None = None
    """Every GEMM's FLOPs / their time, GFLOP/s."""
    sgemm_gflops: float | None = None
    """This machine's fp32 GEMM rate through torch at 1024² (`sgemm_gflops`), measured before the profile."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GemmSites:
    """What a lowering report says of one method's delegated GEMMs: delegate, module and FLOPs of each, in order."""

    delegates: Sequence[int]
    modules: Sequence[str]
    flops: Sequence[Any]
    symbols: SizeSymbols

    @classmethod
    def from_report(cls, method: Mapping[str, Any]) -> GemmSites | None:
        """From one method of a lowering report's dictionary (a sidecar's ``lowering.methods[name]``); None if it
        lists no GEMMs (a report older than the list, a method without delegated GEMMs) or cannot be read."""
        try:
            gemms = method.get("delegated_gemms") or []
            if not gemms:
                return None
            return cls(
                delegates=[int(g["delegate"]) for g in gemms],
                modules=[str(g["gemm"]).split(" @ ", 1)[-1] for g in gemms],
                flops=[g["flops"] for g in gemms],
                symbols={
                    str(k): (int(v[0]), int(v[1]), int(v[2]), int(v[3])) for k, v in method["size_symbols"].items()
                },
            )
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):  # a damaged or hand-edited sidecar
            return None

    def flops_at(self, shapes: Sequence[Sequence[int]]) -> list[float | None]:
        """Each GEMM's FLOPs for inputs of ``shapes``; None where the report could not write them."""
        try:
            values = symbol_values(self.symbols, shapes)
        except ValueError:
            return [None] * len(self.flops)
        result: list[float | None] = []
        for tree in self.flops:
            try:
                result.append(None if tree is None else float(evaluate(tree, values)))
            except ValueError:
                result.append(None)
        return result


def layer_of(module: str) -> str:
    """The layer a module belongs to: its path up to the first index (``encoder.layers.3.attention.q_proj`` ->
    ``encoder.layers.3``), or the whole path for a module outside any list."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return module


def is_gemm(kind: str) -> bool:
    return any(word in kind for word in GEMM_KINDS)


def profile_program(
    buffer: bytes,
    inputs: Sequence[torch.Tensor],
    *,
    runs: int,
    warmup: int = 1,
    method: str = "forward",
    gemms: GemmSites | None = None,
) -> Profile:
    """Run ``method`` of the program ``buffer`` (loaded with ETDump on) ``warmup + runs`` times and sum its ETDump.

    The bytes must load (check them with :class:`~audiodeploy.runtime.Program` first: this load has no probe).
    """
    from audiodeploy.runtime.program import _runtime
    from audiodeploy.runtime.runtime_log import runtime_log
    from audiodeploy.runtime.weight_cache import load_with_weight_cache

    runtime = _runtime()
    native: dict[str, Any] = {}

    def load() -> str:
        with runtime_log() as log:
            native["program"] = runtime._load_program_from_buffer(buffer, enable_etdump=True, debug_buffer_size=0)
            native["method"] = native["program"].load_method(method)
        return log.getvalue()

    def unload() -> None:
        native.pop("method")  # before the program it belongs to
        native.pop("program")

    load_with_weight_cache(load, unload, buffer)  # as audiodeploy's runtime loads it
    program, loaded = native.pop("program"), native.pop("method")
    with runtime_log(), tempfile.TemporaryDirectory(prefix="audiodeploy-profile-") as folder:
        for _ in range(warmup + runs):
            loaded.set_inputs(tuple(inputs))
            loaded.execute()
        etdump = Path(folder) / "run.etdump"
        program.write_etdump_result_to_file(str(etdump), str(Path(folder) / "run.debug"))
        data = etdump.read_bytes()
        del loaded, program
    blocks = [block for block in _run_blocks(data) if block][warmup:]
    shapes = [tuple(t.shape) for t in inputs]
    return summarize(blocks, gemms, gemms.flops_at(shapes) if gemms else None)


@dataclass(frozen=True)
class _Event:
    name: str
    ns: int
    delegate: int | None
    """The delegate call it ran in (0 first); None outside the delegates."""


def _run_blocks(etdump: bytes) -> list[list[_Event]]:
    """The events of each run, in the order they ran, with the run's total as a ``Method::execute`` event."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    runs = []
    for run in deserialize_from_etdump_flatcc(etdump).run_data:
        if run.name != "Execute":
            continue
        events: list[_Event] = []
        pending: list[tuple[str, int]] = []  # XNNPACK's operators, logged before their delegate call ends
        named: dict[int, str] = {}  # a kernel's name, logged inside its OPERATOR_CALL
        delegate = 0
        for event in run.events or []:
            profile = event.profile_event
            if profile is None:
                continue
            ns = int(profile.end_time) - int(profile.start_time)
            if profile.name is None:
                pending.append((str(profile.delegate_debug_id_str), ns))
            elif profile.name == "DELEGATE_CALL":
                events.extend(_Event(_kind(name), t, delegate) for name, t in pending)
                events.append(_Event(SETUP, ns - sum(t for _, t in pending), delegate))
                pending, delegate = [], delegate + 1
            elif profile.name.startswith("native_call_"):
                named[profile.instruction_id] = profile.name.removeprefix("native_call_")
            elif profile.name == "OPERATOR_CALL":
                kernel = named.pop(profile.instruction_id, "operators without a kernel name")
                events.append(_Event(f"{kernel} (outside delegates)", ns, None))
            elif profile.name == "Method::execute":
                events.append(_Event("Method::execute", ns, None))
        runs.append(events)
    return runs


def _kind(operator: str) -> str:
    """``Fully Connected (NC, F32) GEMM #3`` -> ``Fully Connected (NC, F32) GEMM``."""
    return re.sub(r" #\d+$", "", operator)


def summarize(
    runs: Sequence[Sequence[_Event]], gemms: GemmSites | None, flops: Sequence[float | None] | None
) -> Profile:
    """The profile of the median one of ``runs`` (each run's events), with layers and rates where ``gemms`` and
    ``flops`` are known. One run, so that the parts add up to its total."""
    if not runs:
        raise ValueError("no profiled run")
    totals = [sum(e.ns for e in run if e.name == "Method::execute") for run in runs]
    median = sorted(range(len(runs)), key=totals.__getitem__)[(len(runs) - 1) // 2]
    total_ns = totals[median]
    operators = [e for e in runs[median] if e.name != "Method::execute"]
    layer_names, notes = _layers(operators, gemms)
    flops_known = flops is not None and bool(layer_names) and all(f is not None for f in flops)
    kinds: dict[str, _Sum] = defaultdict(_Sum)
    layers: dict[str, _Sum] = defaultdict(_Sum)
    gemm_index = 0
    for position, event in enumerate(operators):
        gemm_flops = 0.0
        if event.delegate is not None and is_gemm(event.name):
            if flops_known:
                assert flops is not None
                gemm_flops = flops[gemm_index] or 0.0
            gemm_index += 1
        kinds[event.name].add(event, gemm_flops)
        if layer_names:
            layers[layer_names[position] or ""].add(event, gemm_flops)
    gemm_ns = sum(e.ns for e in operators if e.delegate is not None and is_gemm(e.name))
    total_flops = sum(k.flops for k in kinds.values())
    if gemms is not None and layer_names and not flops_known:
        notes.append("the FLOPs of some GEMMs are not known at these input sizes: no GFLOP/s")
    return Profile(
        engine="executorch",
        runs=len(runs),
        median_ms=total_ns / 1e6,
        operators=tuple(sorted((k.row(name, total_ns) for name, k in kinds.items()), key=lambda o: -o.ms)),
        layers=tuple(k.row(name, total_ns) for name, k in layers.items()),
        gemm_gflops=total_flops / gemm_ns if total_flops and gemm_ns else None,  # FLOP/ns = GFLOP/s
        notes=tuple(notes),
    )


class _Sum:
    """Operators' time, count and GEMM FLOPs, added up."""

    def __init__(self) -> None:
        self.ns, self.calls, self.flops = 0, 0, 0.0

    def add(self, event: _Event, flops: float) -> None:
        self.ns += event.ns
        self.calls += 1
        self.flops += flops

    def row(self, name: str, total_ns: int) -> OperatorTime:
        rate = self.flops / self.ns if self.flops and self.ns else None
        return OperatorTime(name=name, calls=self.calls, ms=self.ns / 1e6, share=self.ns / total_ns, gflops=rate)


def _layers(operators: Sequence[_Event], gemms: GemmSites | None) -> tuple[list[str | None], list[str]]:
    """The layer of each of a run's ``operators``, or [] with the reason in the notes."""
    if gemms is None:
        return [], ["no lowering report lists this program's GEMMs (a program exported before it did): no layers"]
    by_delegate: dict[int, list[str]] = defaultdict(list)
    for delegate, module in zip(gemms.delegates, gemms.modules, strict=True):
        by_delegate[delegate].append(layer_of(module))
    counted: dict[int, int] = defaultdict(int)
    for event in operators:
        if event.delegate is not None and is_gemm(event.name):
            counted[event.delegate] += 1
    mismatched = sorted(d for d in set(counted) | set(by_delegate) if counted[d] != len(by_delegate[d]))
    if mismatched:
        return [], [
            f"delegate {mismatched[0]} ran {counted[mismatched[0]]} GEMM operators where the lowering report lists "
            f"{len(by_delegate[mismatched[0]])}: no layers"
        ]
    layers: list[str | None] = []
    seen: dict[int, int] = defaultdict(int)
    current: str | None = None
    for event in operators:
        if event.delegate is None or event.name == SETUP:
            layers.append("outside delegates" if event.delegate is None else SETUP)
            continue
        delegate_layers = by_delegate.get(event.delegate) or ["(a delegate without GEMMs)"]
        if is_gemm(event.name):
            current = delegate_layers[seen[event.delegate]]
            seen[event.delegate] += 1
        elif seen[event.delegate] == 0:
            current = delegate_layers[0]
        layers.append(current)
    return layers, []


def sgemm_gflops(size: int = 1024, repeats: int = 8) -> float:
    """This machine's fp32 GEMM rate through torch (``size``² matrices, torch's threads), GFLOP/s: what a GEMM
    kind's rate is read against."""
    import time

    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(2):
        torch.mm(a, b)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


OPERATORS_SHOWN = 14
"""The most time-consuming operator kinds `format_profile` lists; the rest are summed in one line."""


def format_profile(profile: Profile, title: str) -> str:
    """The profile as the terminal shows it: a heading, the operator kinds by time, then the layers in order."""
    rate = ""
    if profile.gemm_gflops is not None:
        rate = f"; GEMMs at {profile.gemm_gflops:.0f} GFLOP/s"
        if profile.sgemm_gflops:
            rate += (
                f" ({profile.gemm_gflops / profile.sgemm_gflops:.0%} of torch's sgemm here, {profile.sgemm_gflops:.0f})"
            )
    lines = [
        f"profile of {title} ({profile.engine}): median of {profile.runs} profiled run(s) {profile.median_ms:.2f} ms{rate}"
    ]
    lines.append(f"  {'operator kind':<48} {'calls':>6} {'ms/run':>9} {'share':>7} {'GFLOP/s':>8}")
    shown = profile.operators[:OPERATORS_SHOWN]
    lines += [_profile_row(o) for o in shown]
    rest = profile.operators[OPERATORS_SHOWN:]
    if rest:
        ms = sum(o.ms for o in rest)
        lines.append(
            f"  {f'{len(rest)} more kinds':<48} {sum(o.calls for o in rest):>6} {ms:>9.3f} "
            f"{ms / profile.median_ms if profile.median_ms else 0:>7.1%}"
        )
    if profile.layers:
        lines.append(f"  {'layer (other operators count with the GEMM before them)':<48} {'ops':>6}")
        lines += [_profile_row(layer) for layer in profile.layers]
    lines += [f"  note: {note}" for note in profile.notes]
    return "\n".join(lines)


def _profile_row(row: OperatorTime) -> str:
    rate = f"{row.gflops:8.0f}" if row.gflops is not None else f"{'':8}"
    name = row.name if len(row.name) <= 48 else "..." + row.name[-45:]
    return f"  {name:<48} {row.calls:>6} {row.ms:>9.3f} {row.share:>7.1%} {rate}"
