"""The runtimes a benchmark compares, each behind the same two calls: ``load()``, then ``run(inputs)``.

- ``audiodeploy``: ``audiodeploy.lower`` (default options: folded, rewritten) run by ExecuTorch's runtime (XNNPACK);
- ``stock``: the same module lowered the stock ExecuTorch way (``LoweringOptions(fold=False)``);
- ``pte``: a .pte file given by the user, run by ExecuTorch's runtime;
- ``eager``: the PyTorch module itself, under ``torch.no_grad()``;
- ``onnxruntime``: ONNX Runtime on an ONNX export of the whole module (``torch.onnx.export(...,
  dynamo=True)``, the same dynamic length axis; int32 ``index_put`` indices exported as int64, see
  :func:`index_put_with_int64_indices`), all graph optimizations, the same thread count;
- ``audiodeploy-int8``: ``audiodeploy.lower`` with ``Quantization(<the recipe's first scheme, see request.int8_scheme>,
  keep_fp32=<the recipe's default>)``;
- ``onnxruntime-int8``: ONNX Runtime on ``onnxruntime.quantization.quantize_dynamic`` (QInt8 weights, per
  tensor, its defaults) of the same ONNX export ``onnxruntime`` runs.

Building a runtime does the slow, one-off work (lowering, ONNX export) and records how long it took;
``load()`` is what a user's app pays at start-up and is timed by the transport.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.onnx_profile import onnx_profile
from audiodeploy.bench.request import require_onnxruntime
from audiodeploy.runtime.profile import Profile

LABELS = {
    "audiodeploy": "audiodeploy (ExecuTorch + XNNPACK, computed weights folded, graph rewritten for XNNPACK)",
    "pte": "ExecuTorch + XNNPACK (given .pte)",
    "stock": "stock ExecuTorch lowering",
    "eager": "eager PyTorch",
    "onnxruntime": "ONNX Runtime",
    "audiodeploy-fp16": "audiodeploy fp16 (ExecuTorch + XNNPACK, folded in fp32, then stored and run in fp16)",
    "audiodeploy-int8": "audiodeploy int8 (ExecuTorch + XNNPACK, folded, then quantized)",
    "onnxruntime-int8": "ONNX Runtime int8 (quantize_dynamic, QInt8)",
}


TranslationTable = dict[Callable[..., Any], Callable[..., Any]]
"""``torch.onnx.export(custom_translation_table=...)``: a torch op overload to the function that translates it."""


@dataclass
class RuntimeInfo:
    """What a runtime is, independent of the input length: engine, delegates, program size, preparation time."""

    name: str
    label: str
    engine: str
    """``executorch``, ``pytorch`` or ``onnxruntime``."""
    delegates: int | None = None
    ops_outside_delegates: dict[str, int] | None = None
    program_bytes: int | None = None
    """.pte or .onnx size."""
    prepare_s: float | None = None
    """Lowering (ExecuTorch) or export (ONNX) time, from the PyTorch module; None when nothing was prepared."""
    notes: list[str] = field(default_factory=list)
    lowering_report: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Runtime(ABC):
    """One way of running the model: ``load()`` once, then ``run(inputs)`` returns the first output."""

    info: RuntimeInfo
    loads: bool = True
    """False when there is nothing to load (eager PyTorch): its load time is then not a figure."""

    @property
    def name(self) -> str:
        return self.info.name

    @abstractmethod
    def load(self) -> None:
        """Make the runtime ready to run (parse the program, pack weights, create the session)."""

    @abstractmethod
    def run(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Run once on ``inputs``; the first output as a tensor."""

    def unload(self) -> None:  # noqa: B027 (a hook: most runtimes have nothing to free)
        """Free what ``load()`` allocated."""


class ExecuTorchRuntime(Runtime):
    """A .pte run by ExecuTorch's Python runtime; ``buffer`` is also what a device transport pushes.

    ``load()`` loads the program and its ``forward`` method (``executorch.runtime``), so the
    load time includes XNNPACK's set-up (weight packing), which the first call of a lazily
    loaded module would otherwise pay.
    """

    def __init__(self, info: RuntimeInfo, buffer: bytes, origin: str) -> None:
        self.info = info
        self.buffer = buffer  # the runtime reads from these bytes: they live as long as the method
        self.origin = origin
        self._program: Any = None  # audiodeploy.runtime.Program once loaded (imported with the runtime)
        self._method: Any = None  # executorch's LoadedMethod
        self.report: Mapping[str, Any] | None = info.lowering_report
        """The lowering report (a .pte's: its sidecar's): a profile reads the delegated GEMMs from it."""

    def load(self) -> None:
        from audiodeploy.runtime.program import Program, ProgramLoadError

        # audiodeploy's one loader: its checks, its crash probe, verification, every method loaded, its
        # one-line ProgramLoadError. Bytes this process lowered (``prepare_s`` is set only then) are trusted,
        # so that the load time is what an app pays for a program it has loaded before, not the probe.
        program = Program(self.buffer, origin=self.origin, trusted=self.info.prepare_s is not None)
        if "forward" not in program.method_names:
            raise ProgramLoadError(
                f"{self.origin}: the program has no 'forward' method (it has {', '.join(program.method_names)})"
            )
        self._method = program.method("forward")  # `execute(inputs)`: no checks in Python, for timing
        self._program = program
        cache = "XNNPACK's weight cache " + ("on" if program.weight_cache else "off")
        if cache not in self.info.notes:
            self.info.notes.append(cache)

    def run(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        if self._method is None:
            raise RuntimeError(f"{self.name}: run() before load()")
        return self._method.execute(tuple(inputs))[0]

    def unload(self) -> None:
        self._method = None
        self._program = None

    def profile(self, inputs: Sequence[torch.Tensor], runs: int, warmup: int) -> Profile:
        """Where the time goes in ``forward`` on ``inputs`` (:func:`audiodeploy.runtime.profile.profile_program`)."""
        from audiodeploy.runtime.profile import GemmSites, profile_program

        method = (self.report or {}).get("methods", {}).get("forward")
        gemms = GemmSites.from_report(method) if isinstance(method, Mapping) else None
        return profile_program(self.buffer, inputs, runs=runs, warmup=warmup, gemms=gemms)

    def input_upper_bounds(self) -> list[tuple[tuple[int, ...], int]]:
        """(shape, ExecuTorch dtype code) of each input at its upper bound, from the program's method meta.

        ExecuTorch's ``executor_runner`` sizes every input to this bound. Loads the program (and drops it)
        unless it is loaded: a ProgramLoadError here means it does not load.
        """
        from audiodeploy.runtime.program import Program, ProgramLoadError

        program = self._program or Program(self.buffer, origin=self.origin, trusted=self.info.prepare_s is not None)
        if "forward" not in program.method_names:
            raise ProgramLoadError(
                f"{self.origin}: the program has no 'forward' method (it has {', '.join(program.method_names)})"
            )
        return [(spec.sizes, -1 if spec.scalar_type is None else spec.scalar_type) for spec in program.input_specs()]


def lower_module(
    name: str,
    module: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    dynamic_shapes: Any,
    fold: bool,
    quantize: str | None = None,
    keep_fp32: Sequence[str] = (),
    dtype: torch.dtype = torch.float32,
) -> ExecuTorchRuntime:
    """Lower ``module`` with ``audiodeploy.lower`` (``fold=False``: stock ExecuTorch; ``quantize``: int8 with that
    scheme, with the GEMMs of ``keep_fp32`` in fp32; ``dtype``: fp32 or fp16) into a runtime."""
    from audiodeploy import LoweringOptions, Quantization, QuantizationScheme, lower

    quantization = None
    if quantize is not None:
        quantization = Quantization(QuantizationScheme(quantize), keep_fp32=keep_fp32)
    start = time.perf_counter()
    lowered = lower(
        module,
        example_inputs,
        dynamic_shapes=dynamic_shapes,
        options=LoweringOptions(fold=fold, quantization=quantization, dtype=dtype),
    )
    prepare_s = time.perf_counter() - start
    if lowered.external_data:
        raise BenchError(f"{name}: the lowered program keeps constants in a .ptd file, which bench does not run")
    method = lowered.report.methods["forward"]
    info = RuntimeInfo(
        name=name,
        label=LABELS[name],
        engine="executorch",
        delegates=method.delegates,
        ops_outside_delegates=dict(method.ops_outside_delegates),
        program_bytes=len(lowered.buffer),
        prepare_s=prepare_s,
        lowering_report=lowered.report.to_dict(),
    )
    if quantize is not None:
        kept = f"; kept fp32: {', '.join(keep_fp32)}" if keep_fp32 else "; nothing kept fp32"
        # Worded as the records in benchmarks/results/ have it, so that old and new records read alike.
        info.notes.append(f"audiodeploy.lower(quantize={quantize!r}){kept}")
    if lowered.report.precision is not None:
        measures = lowered.report.precision.measures("forward")
        info.notes.append(f"audiodeploy.lower(dtype=torch.float16); vs fp32 eager: {measures}")
    return ExecuTorchRuntime(info, lowered.buffer, origin=f"{name} lowering")


def pte_runtime(path: Path) -> ExecuTorchRuntime:
    """A .pte file as a runtime; delegates and kernels outside them read from the program itself."""
    from audiodeploy.runtime import ProgramLoadError
    from audiodeploy.runtime.inspection import ProgramFormatError, describe_program

    buffer = path.read_bytes()
    try:
        methods = {m.name: m for m in describe_program(buffer)}
    except ProgramFormatError as error:  # the reader's only failure: bytes that are no program's flatbuffer
        raise ProgramLoadError(f"{path} is not a loadable ExecuTorch program: {error}") from None
    if "forward" not in methods:
        remedy = f"; bench the recipe it was exported from with --method {' or '.join(methods)}" if methods else ""
        raise BenchError(
            f"{path}: the program has no 'forward' method, which bench measures of a .pte (it has "
            f"{', '.join(methods) or 'none'}){remedy}"
        )
    forward = methods["forward"]
    info = RuntimeInfo(
        name="pte",
        label=LABELS["pte"],
        engine="executorch",
        delegates=forward.delegates,
        ops_outside_delegates=dict(forward.kernels),
        program_bytes=len(buffer),
    )
    return ExecuTorchRuntime(info, buffer, origin=str(path))


class EagerRuntime(Runtime):
    """The PyTorch module itself; nothing to load (it is already in memory)."""

    loads = False

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module.eval()
        parameters = sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
        self.info = RuntimeInfo(name="eager", label=LABELS["eager"], engine="pytorch", program_bytes=parameters)
        self.info.notes.append("program_bytes: the module's parameters and buffers")

    def load(self) -> None:
        pass

    def run(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return first_output(self.module(*inputs))


def first_output(outputs: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """The output a benchmark compares: the only one, or the first (a chunked codec's encode also gives the chunk's
    scale), as the programs and ONNX Runtime give theirs."""
    return outputs if isinstance(outputs, torch.Tensor) else outputs[0]


def onnxruntime_session_options(threads: int) -> Any:
    """ONNX Runtime's session options for a timed run: all graph optimizations, ``threads`` intra-op threads,
    sequential execution, and idle threads that do not spin (in an interleaved run a spinning pool takes the CPU from
    the runtime timed next: measured on a Piper voice, it made audiodeploy's next run 1.6x slower)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return options


class OnnxRuntime(Runtime):
    """ONNX Runtime (CPU execution provider) on the dynamo ONNX export of the whole module.

    Run with :func:`onnxruntime_session_options`.

    ``int8=True`` (``onnxruntime-int8``) runs ``quantize_dynamic`` (QInt8) of the export. ``exported``
    is an export already made, so that ``onnxruntime`` and ``onnxruntime-int8`` run the same one (see
    :func:`export_onnx`).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        example_inputs: tuple[torch.Tensor, ...],
        dynamic_shapes: Any,
        threads: int,
        *,
        int8: bool = False,
        exported: OnnxExport | None = None,
        profile: bool = False,
    ) -> None:
        name = "onnxruntime-int8" if int8 else "onnxruntime"
        require_onnxruntime(name)
        import onnxruntime

        self.threads = threads
        exported = exported if exported is not None else export_onnx(module, example_inputs, dynamic_shapes)
        model = exported.model
        notes = [
            "the whole module in ONNX Runtime: torch.onnx.export(dynamo=True); ORT_ENABLE_ALL; CPUExecutionProvider; "
            "no thread spinning",
            *exported.notes,
        ]
        start = time.perf_counter()
        if int8 and exported.weights:
            raise BenchError(
                "ONNX Runtime int8 of a model over protobuf's 2 GiB is not measured here (quantize_dynamic reads "
                "the whole model as one protobuf); leave onnxruntime-int8 out of --compare"
            )
        if int8:
            model = quantize_onnx_dynamic(model)
            notes.append(
                "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8), its defaults (per-tensor weights)"
            )
        self.model: bytes | None = model
        self.weights = exported.weights if not int8 else b""
        prepare_s = exported.export_s + time.perf_counter() - start
        self.info = RuntimeInfo(
            name=name,
            label=f"{LABELS[name]} {onnxruntime.__version__}",
            engine="onnxruntime",
            program_bytes=len(model) + len(self.weights),
            prepare_s=prepare_s,
            notes=notes,
        )
        self._session: Any = None  # an onnxruntime.InferenceSession once loaded
        self._input_names: list[str] = []
        # The model kept past load() for profile(): a profiling session must be made with profiling on.
        self._profiled: bytes | None = model if profile else None
        self._profiled_weights = self.weights if profile else b""

    def load(self) -> None:
        if self.model is None:
            raise RuntimeError(f"{self.name}: load() twice")
        self._session = self._session_for(self.model, self.weights)
        self._input_names = [i.name for i in self._session.get_inputs()]
        self.model, self.weights = None, b""  # the session holds its own copy of the weights

    def _session_for(self, model: bytes, weights: bytes, profile_prefix: str | None = None) -> Any:
        """An InferenceSession as the class docstring says; with ``profile_prefix``, profiling into files there."""
        import onnxruntime

        options = onnxruntime_session_options(self.threads)
        if profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        if weights:
            options.add_external_initializers_from_files_in_memory([EXTERNAL_WEIGHTS], [weights], [len(weights)])
        try:
            return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception classes, one per status code
            detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BenchError(
                f"ONNX Runtime cannot load the ONNX export of this model ({detail[:300]}); "
                f"leave {self.name} out of --compare"
            ) from None

    def run(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        if self._session is None:
            raise RuntimeError(f"{self.name}: run() before load()")
        feed = {name: tensor.numpy() for name, tensor in zip(self._input_names, inputs)}
        return torch.from_numpy(self._session.run(None, feed)[0])

    def unload(self) -> None:
        self._session = None

    def profile(self, inputs: Sequence[torch.Tensor], runs: int, warmup: int) -> Profile:
        """ONNX Runtime's own profile of ``warmup + runs`` runs on ``inputs`` in a second session, as ``load()``
        makes it but with profiling on (:func:`audiodeploy.bench.onnx_profile.onnx_profile`)."""
        if self._profiled is None:
            raise RuntimeError(f"{self.name}: made without profile=True")
        with tempfile.TemporaryDirectory(prefix="audiodeploy-ort-profile-") as folder:
            session = self._session_for(self._profiled, self._profiled_weights, profile_prefix=f"{folder}/ort")
            names = [i.name for i in session.get_inputs()]
            feed = {name: tensor.numpy() for name, tensor in zip(names, inputs)}
            for _ in range(warmup + runs):
                session.run(None, feed)
            trace = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
            del session
        return onnx_profile(trace, warmup)


@dataclass(frozen=True)
class OnnxExport:
    """The ONNX export ``onnxruntime`` and ``onnxruntime-int8`` run."""

    model: bytes
    """The serialized ONNX model."""
    export_s: float
    notes: tuple[str, ...] = ()
    """What the export did beyond the plain ``torch.onnx.export(dynamo=True)``."""
    weights: bytes = b""
    """The file ``model`` reads its larger initializers from as ONNX external data (:data:`EXTERNAL_WEIGHTS`),
    for a model over protobuf's 2 GiB; empty when ``model`` holds them all."""


EXTERNAL_WEIGHTS = "weights.bin"
"""The external-data file name an :class:`OnnxExport` over 2 GiB refers to; ONNX Runtime is given its bytes
from memory (``SessionOptions.add_external_initializers_from_files_in_memory``), so no file is written."""

PROTOBUF_LIMIT = 2**31 - 1
"""The largest message protobuf serializes."""


def export_onnx(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], dynamic_shapes: Any) -> OnnxExport:
    """The ONNX export ``onnxruntime`` and ``onnxruntime-int8`` run, and how many seconds it took."""
    from audiodeploy.lowering.integer_constants import integer_scalar_constants

    start = time.perf_counter()
    widened: list[str] = []  # the int32 indices cast
    exact_constants = bool(integer_scalar_constants(module))
    proto = _export_onnx(module, example_inputs, dynamic_shapes, index_put_with_int64_indices(widened), exact_constants)
    model, weights = serialize_with_external_weights(proto)
    notes: tuple[str, ...] = ()
    if exact_constants:
        notes += (
            "exported first by torch.export with the module's 0-d integer tensors as the numbers they hold "
            "(audiodeploy's export_with_exact_integer_constants), as audiodeploy exports it: torch.onnx's own "
            "torch.export cannot follow a padding computed from them through a dynamic length",
        )
    if widened:
        notes += (
            f"int32 indices of {len(widened)} index_put cast to int64 in the export (torch.onnx.export's custom_translation_table): "
            "torch.onnx passes torch's int32 indices (torch.istft's overlap-add is such an index_put) to ONNX's "
            "ScatterND, which takes int64 only, and ONNX Runtime refuses the model without the cast",
        )
    if weights:
        notes += (
            f"over protobuf's 2 GiB: {len(weights) / 2**30:.2f} GiB of initializers kept as ONNX external data, "
            "given to ONNX Runtime from memory",
        )
    return OnnxExport(model, time.perf_counter() - start, notes, weights)


def serialize_with_external_weights(
    proto: Any, limit: int = PROTOBUF_LIMIT, smallest_external: int = 1024
) -> tuple[bytes, bytes]:
    """An ONNX ``ModelProto`` serialized, and the external-data file its initializers of at least
    ``smallest_external`` bytes are moved to when they exceed ``limit`` bytes or the whole exceeds protobuf's
    limit (else empty).

    The moved tensors keep their names, types and shapes; each points at its 64-byte aligned offset and length in
    :data:`EXTERNAL_WEIGHTS` (ONNX's external-data fields), as ``onnx.save(..., save_as_external_data=True)`` writes
    them to a file.
    """
    from google.protobuf.message import EncodeError
    from onnx import TensorProto

    # Each initializer is measured alone: protobuf measures a message by encoding it, and the whole would not encode.
    if sum(tensor.ByteSize() for tensor in proto.graph.initializer) <= limit:
        try:
            return proto.SerializeToString(), b""
        except EncodeError:  # the graph itself takes it over the limit
            pass
    weights = bytearray()
    for tensor in proto.graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL or len(tensor.raw_data) < smallest_external:
            continue
        weights += bytes(-len(weights) % 64)
        offset, length = len(weights), len(tensor.raw_data)
        weights += tensor.raw_data
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", EXTERNAL_WEIGHTS), ("offset", offset), ("length", length)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
    return proto.SerializeToString(), bytes(weights)


def index_put_with_int64_indices(widened: list[str]) -> TranslationTable:
    """A ``custom_translation_table`` for ``torch.onnx.export``: ``index_put`` as torch.onnx's own translation
    (onnxscript's torchlib ``aten_index_put``, a ScatterND), with int32 indices cast to int64 first (torch indexes
    with int64, int32, bool or uint8 masks; only int32 needs it).

    Why: torch decomposes ``torch.istft`` into an ``unfold_backward`` and that into an ``_unsafe_index_put`` with
    int32 indices (``torch._decomp``: ``arange(..., dtype=torch.int32)``); torchlib passes them through to
    ScatterND, whose ONNX schema takes int64 indices only, and ONNX Runtime 1.32 refuses the model ("Type
    'tensor(int32)' of input parameter ... of operator (ScatterND) ... is invalid"). No opset or exporter flag
    changes that (opsets 18 to 23 give the same), and torch.onnx's TorchScript exporter exports no complex
    tensors. Other indices are left as they are, so a model without int32 indices exports as without this table.
    The name of each index cast is appended to ``widened``.
    """
    from onnxscript import ir
    from onnxscript.function_libs.torch_lib.ops.core import aten_index_put
    from onnxscript.onnx_opset import opset18 as op

    # Untyped: torch.onnx would infer an ONNX signature from annotations and dispatch on it.
    def index_put(self, indices, values, accumulate=False):
        cast = []
        for index in indices:
            if index is not None and index.dtype == ir.DataType.INT32:
                widened.append(index.name)
                as_int64 = op.Cast(index, to=ir.DataType.INT64)
                # The tracer infers neither for an op inside a custom translation; aten_index_put reads both.
                as_int64.dtype, as_int64.shape = ir.DataType.INT64, index.shape
                index = as_int64
            cast.append(index)
        return aten_index_put(self, cast, values, accumulate)

    return {torch.ops.aten.index_put.default: index_put, torch.ops.aten._unsafe_index_put.default: index_put}


def quantize_onnx_dynamic(model: bytes) -> bytes:
    """``onnxruntime.quantization.quantize_dynamic`` of a serialized ONNX model: QInt8 weights, its defaults."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    chatter = io.StringIO()
    # quantize_dynamic advises pre-processing through the root logger, on every call: not the user's business.
    advice = _DropRecordsFrom("onnxruntime")
    logging.getLogger().addFilter(advice)
    try:
        with tempfile.TemporaryDirectory(prefix="audiodeploy-ort-int8-") as directory:
            output = Path(directory) / "int8.onnx"
            with contextlib.redirect_stdout(chatter):
                quantize_dynamic(onnx.load_from_string(model), output, weight_type=QuantType.QInt8)
            return output.read_bytes()
    except Exception as error:
        logging.getLogger(__name__).debug("quantize_dynamic output:\n%s", chatter.getvalue())
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BenchError(
            f"ONNX Runtime quantize_dynamic failed ({message}); leave onnxruntime-int8 out of --compare"
        ) from None
    finally:
        logging.getLogger().removeFilter(advice)


class _DropRecordsFrom(logging.Filter):
    """Drops the log records emitted from a package's files (``pathname`` under ``.../<package>/``)."""

    def __init__(self, package: str) -> None:
        super().__init__()
        self.fragment = f"{package}/"

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.pathname.replace("\\", "/")


def _export_onnx(
    module: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    dynamic_shapes: Any,
    custom_translation_table: TranslationTable,
    exact_integer_constants: bool,
) -> Any:
    """The ONNX ``ModelProto``; the exporter's chatter goes to the debug log, not the user's terminal. With
    ``exact_integer_constants``, torch.onnx is given the program `export_with_exact_integer_constants` exports
    (the same computation as eager's, its sizes following the length) instead of the module."""
    from audiodeploy.lowering.integer_constants import export_with_exact_integer_constants

    chatter = io.StringIO()
    quiet = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in quiet]
    try:
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(chatter), torch.no_grad():
            exportable: torch.nn.Module | torch.export.ExportedProgram = module
            if exact_integer_constants:
                # torch.onnx 2.14 translates a floor division of a negative size (a ceil written as -(-n // s))
                # as ONNX's truncating Div: the export holds where those divisions are exact, as they are at the
                # multiples of the hop a codec is given (its dynamic shape says so), not between them.
                exportable = export_with_exact_integer_constants(module, example_inputs, dynamic_shapes)
            program = torch.onnx.export(
                exportable,
                example_inputs,
                dynamo=True,
                dynamic_shapes=dynamic_shapes,
                optimize=True,
                verbose=False,
                custom_translation_table=custom_translation_table,
            )
        return program.model_proto
    except Exception as error:
        logging.getLogger(__name__).debug("ONNX export output:\n%s", chatter.getvalue())
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BenchError(f"ONNX export of the module failed ({message}); leave onnxruntime out of --compare") from None
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
