"""ONNX Runtime's own profile of a session, summed as audiodeploy's is (:mod:`audiodeploy.runtime.profile`).

ONNX Runtime writes a Chrome trace when ``SessionOptions.enable_profiling`` is on: a ``model_run`` event per run
and a ``<node>_kernel_time`` event per node with its operator type (after ORT's fusions: ``FusedMatMul``,
``SkipLayerNormalization``, ``BiasGelu``, ...) and its input and output shapes. The GEMMs' FLOPs come from those
shapes. ORT's node names do not carry the PyTorch modules: no layers.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from audiodeploy.runtime.profile import OperatorTime, Profile

_MATMULS = ("MatMul", "FusedMatMul", "Gemm", "MatMulNBits", "MatMulInteger", "DynamicQuantizeMatMul")
_CONVOLUTIONS = ("Conv", "FusedConv", "NhwcFusedConv", "ConvInteger")


def onnx_profile(trace: Sequence[Mapping[str, Any]], warmup: int) -> Profile:
    """The profile of the median one of the runs in ``trace`` (ORT's profile JSON), after ``warmup`` runs."""
    runs = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    runs = runs[warmup:]
    if not runs:
        raise ValueError("ONNX Runtime's profile holds no run")
    nodes = [e for e in trace if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(runs))
    calls: dict[str, int] = defaultdict(int)
    flops: dict[str, float] = defaultdict(float)
    starts = [start for start, _ in runs]
    for event in nodes:
        run = _run_of(event["ts"], starts, runs)
        if run is None:
            continue
        kind = str(event.get("args", {}).get("op_name", "?"))
        by_kind[kind][run] += float(event["dur"])
        if run == 0:
            calls[kind] += 1
            flops[kind] += node_flops(kind, event.get("args", {})) or 0.0
    totals = [end - start for start, end in runs]
    median = sorted(range(len(runs)), key=totals.__getitem__)[(len(runs) - 1) // 2]  # its parts add up to it
    median_us = totals[median]
    operators = []
    for kind, times in by_kind.items():
        us = times[median]
        rate = flops[kind] / (us * 1e3) if flops[kind] and us else None  # FLOP/ns = GFLOP/s
        operators.append(OperatorTime(name=kind, calls=calls[kind], ms=us / 1e3, share=us / median_us, gflops=rate))
    gemm_us = sum(times[median] for kind, times in by_kind.items() if flops[kind])
    total_flops = sum(flops.values())
    return Profile(
        engine="onnxruntime",
        runs=len(runs),
        median_ms=median_us / 1e3,
        operators=tuple(sorted(operators, key=lambda o: -o.ms)),
        gemm_gflops=total_flops / (gemm_us * 1e3) if total_flops and gemm_us else None,
        notes=("ONNX Runtime's node names do not carry the PyTorch modules: no layers",),
    )


def _run_of(ts: float, starts: Sequence[float], runs: Sequence[tuple[float, float]]) -> int | None:
    """The index of the run (sorted, disjoint ``(start, end)``) whose span holds ``ts``; None between runs."""
    index = bisect.bisect_right(starts, ts) - 1
    return index if index >= 0 and ts <= runs[index][1] else None


def node_flops(kind: str, arguments: Mapping[str, Any]) -> float | None:
    """2 x the multiply-adds of a matmul or convolution node, from the shapes ORT recorded; None for other nodes."""
    inputs = [_shape(s) for s in arguments.get("input_type_shape", [])]
    outputs = [_shape(s) for s in arguments.get("output_type_shape", [])]
    if not inputs or not outputs or inputs[0] is None or outputs[0] is None:
        return None
    if kind in _MATMULS and inputs[0]:
        return 2.0 * math.prod(outputs[0]) * inputs[0][-1]
    if kind in _CONVOLUTIONS and len(inputs) > 1 and inputs[1]:
        return 2.0 * math.prod(outputs[0]) * math.prod(inputs[1][1:])
    if kind == "ConvTranspose" and len(inputs) > 1 and inputs[1]:
        return 2.0 * math.prod(inputs[0]) * math.prod(inputs[1][1:])
    return None


def _shape(entry: object) -> list[int] | None:
    """``{"float": [1, 50, 64]}`` -> ``[1, 50, 64]``."""
    if not isinstance(entry, Mapping) or len(entry) != 1:
        return None
    (shape,) = entry.values()
    return [int(d) for d in shape] if isinstance(shape, list) else None
