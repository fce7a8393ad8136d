"""``audiodeploy bench``: latency of audiodeploy's lowering side by side with stock ExecuTorch, eager PyTorch
and ONNX Runtime, in one interleaved run on this machine, or on an Android phone over adb.

    from audiodeploy.bench import BenchRequest, run_bench, format_table
    record = run_bench(BenchRequest("wav2vec2", variant="tiny", compare=("stock", "eager", "onnxruntime")))
    print(format_table(record))

Modules: ``request`` (what to measure, checked without torch), ``device`` (``--device``), ``runner`` (the run),
``runtimes`` (audiodeploy, stock, .pte, eager,
ONNX Runtime), ``transports`` (local, native, qemu-aarch64, adb, ssh), ``timing`` (interleaved timing, shared
with ``benchmarks/``), ``memory``, ``results`` (the one JSON schema and the table), ``plot``, ``pos_conv`` (the
``pos-conv`` target: wav2vec2's weight-normed positional convolution, stock against folded lowering).

Names are imported on first use: the runner imports torch, and neither checking a request nor reading or writing
records (``results``, as ``benchmarks/generate_models_md.py`` does) should pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from audiodeploy.bench.errors import BenchError

_LAZY = {
    "results": ("SCHEMA", "BenchRecord", "format_table", "read_json", "validate", "write_json"),
    "request": ("BenchRequest", "check", "parse_compare"),
    "runner": ("measure_bench", "run_bench"),
}
"""Module -> the names imported from it on first use."""

__all__ = ["BenchError", *(name for names in _LAZY.values() for name in names)]

if TYPE_CHECKING:
    from audiodeploy.bench.request import BenchRequest, check, parse_compare
    from audiodeploy.bench.results import SCHEMA, BenchRecord, format_table, read_json, validate, write_json
    from audiodeploy.bench.runner import measure_bench, run_bench


def __getattr__(name: str) -> Any:
    for module, names in _LAZY.items():
        if name in names:
            return getattr(importlib.import_module(f"audiodeploy.bench.{module}"), name)
    raise AttributeError(f"module 'audiodeploy.bench' has no attribute {name!r}")
