"""``audiodeploy bench``: latency of audiodeploy's lowering side by side with stock ExecuTorch, eager PyTorch
and ONNX Runtime, in one interleaved run on this machine, or on an Android phone over adb.

    from audiodeploy.bench import BenchRequest, run_bench, format_table
    record = run_bench(BenchRequest("wav2vec2", variant="tiny", compare=("stock", "eager", "onnxruntime")))
    print(format_table(record))

Modules: ``runner`` (the request and the run), ``runtimes`` (audiodeploy, stock, .pte, eager,
ONNX Runtime), ``transports`` (local, native, qemu-aarch64, adb, ssh), ``timing`` (interleaved timing, shared
with ``benchmarks/``), ``memory``, ``results`` (the one JSON schema and the table), ``plot``, ``pos_conv`` (the
``pos-conv`` target: wav2vec2's weight-normed positional convolution, stock against folded lowering).
"""

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import SCHEMA, format_table, read_json, validate, write_json
from audiodeploy.bench.runner import BenchRequest, check, parse_compare, run_bench

__all__ = [
    "SCHEMA",
    "BenchError",
    "BenchRequest",
    "check",
    "format_table",
    "parse_compare",
    "read_json",
    "run_bench",
    "validate",
    "write_json",
]
