"""The runtimes a benchmark compares, each behind the same two calls: ``load()``, then ``run(inputs)``.

- ``audiodeploy``: ``audiodeploy.lower(..., fold=True)`` run by ExecuTorch's runtime (XNNPACK);
- ``stock``: the same module lowered the stock ExecuTorch way (``fold=False``);
- ``pte``: a .pte file given by the user, run by ExecuTorch's runtime;
- ``eager``: the PyTorch module itself, under ``torch.no_grad()``;
- ``onnxruntime``: ONNX Runtime on an ONNX export of the same module (``torch.onnx.export(...,
  dynamo=True)``, the same dynamic length axis), all graph optimizations, the same thread count.

Building a runtime does the slow, one-off work (lowering, ONNX export) and records how long it took;
``load()`` is what a user's app pays at start-up and is timed by the transport.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from audiodeploy.bench.errors import BenchError

COMPARABLE = ("stock", "eager", "onnxruntime")
"""What ``--compare`` accepts, in the order results list them (after ``audiodeploy``)."""

LABELS = {
    "audiodeploy": "audiodeploy (ExecuTorch + XNNPACK, computed weights folded, graph rewritten for XNNPACK)",
    "pte": "ExecuTorch + XNNPACK (given .pte)",
    "stock": "stock ExecuTorch lowering",
    "eager": "eager PyTorch",
    "onnxruntime": "ONNX Runtime",
}

BENCH_EXTRA_HINT = "pip install -e '.[bench]'"


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

    def unload(self) -> None:
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
        self._program = None
        self._method = None

    def load(self) -> None:
        from executorch.runtime import Runtime as ExecuTorch
        from executorch.runtime import Verification

        from audiodeploy.runtime import ProgramLoadError

        try:
            self._program = ExecuTorch.get().load_program(self.buffer, verification=Verification.Minimal)
            self._method = self._program.load_method("forward")
        except (RuntimeError, ValueError) as error:
            raise ProgramLoadError(f"{self.origin} is not a loadable ExecuTorch program ({error})") from None

    def run(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        if self._method is None:
            raise RuntimeError(f"{self.name}: run() before load()")
        return self._method.execute(tuple(inputs))[0]

    def unload(self) -> None:
        self._method = None
        self._program = None

    def input_upper_bounds(self) -> list[tuple[tuple[int, ...], int]]:
        """(shape, ExecuTorch dtype code) of each input at its upper bound, from the program's method meta.

        ExecuTorch's ``executor_runner`` sizes every input to this bound.
        """
        from executorch.extension.pybindings import portable_lib

        from audiodeploy.runtime import ProgramLoadError

        try:
            module = portable_lib._load_for_executorch_from_buffer(self.buffer)
            meta = module.method_meta("forward")
            return [
                (tuple(meta.input_tensor_meta(i).sizes()), int(meta.input_tensor_meta(i).dtype()))
                for i in range(meta.num_inputs())
            ]
        except (RuntimeError, ValueError) as error:
            raise ProgramLoadError(f"{self.origin} is not a loadable ExecuTorch program ({error})") from None


def lower_module(
    name: str,
    module: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    dynamic_shapes: Any,
    fold: bool,
) -> ExecuTorchRuntime:
    """Lower ``module`` with ``audiodeploy.lower`` (``fold=False``: stock ExecuTorch) into a runtime."""
    import audiodeploy

    start = time.perf_counter()
    lowered = audiodeploy.lower(module, example_inputs, dynamic_shapes=dynamic_shapes, fold=fold)
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
    return ExecuTorchRuntime(info, lowered.buffer, origin=f"{name} lowering")


def pte_runtime(path: Path) -> ExecuTorchRuntime:
    """A .pte file as a runtime; delegates and kernels outside them read from the program itself."""
    from audiodeploy.runtime import ProgramLoadError
    from audiodeploy.runtime.inspection import describe_program

    buffer = path.read_bytes()
    try:
        methods = {m.name: m for m in describe_program(buffer)}
    except Exception as error:  # the flatbuffer reader raises whatever the bytes provoke
        raise ProgramLoadError(f"{path} is not a loadable ExecuTorch program ({type(error).__name__})") from None
    if "forward" not in methods:
        raise BenchError(f"{path}: the program has no 'forward' method (it has {', '.join(methods) or 'none'})")
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
            return self.module(*inputs)


def require_onnxruntime() -> None:
    """Fail early, in one line, when ``--compare onnxruntime`` cannot be honoured."""
    missing = [name for name in ("onnxruntime", "onnxscript", "onnx") if not _imports(name)]
    if missing:
        raise BenchError(
            f"--compare onnxruntime needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed: {BENCH_EXTRA_HINT}"
        )


def _imports(name: str) -> bool:
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


class OnnxRuntime(Runtime):
    """ONNX Runtime (CPU execution provider) on the dynamo ONNX export of the module.

    All graph optimizations; ``threads`` intra-op threads, sequential execution. Idle
    threads do not spin: in an interleaved run a spinning pool would take the CPU from
    the runtime timed next.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        example_inputs: tuple[torch.Tensor, ...],
        dynamic_shapes: Any,
        threads: int,
    ) -> None:
        require_onnxruntime()
        import onnxruntime

        self.threads = threads
        start = time.perf_counter()
        self.model: bytes | None = _export_onnx(module, example_inputs, dynamic_shapes)
        prepare_s = time.perf_counter() - start
        self.info = RuntimeInfo(
            name="onnxruntime",
            label=f"{LABELS['onnxruntime']} {onnxruntime.__version__}",
            engine="onnxruntime",
            program_bytes=len(self.model),
            prepare_s=prepare_s,
            notes=["torch.onnx.export(dynamo=True); ORT_ENABLE_ALL; CPUExecutionProvider; no thread spinning"],
        )
        self._session = None
        self._input_names: list[str] = []

    def load(self) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        if self.model is None:
            raise RuntimeError("onnxruntime: load() twice")
        self._session = onnxruntime.InferenceSession(self.model, options, providers=["CPUExecutionProvider"])
        self._input_names = [i.name for i in self._session.get_inputs()]
        self.model = None  # the session holds its own copy of the weights

    def run(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        if self._session is None:
            raise RuntimeError("onnxruntime: run() before load()")
        feed = {name: tensor.numpy() for name, tensor in zip(self._input_names, inputs)}
        return torch.from_numpy(self._session.run(None, feed)[0])

    def unload(self) -> None:
        self._session = None


def _export_onnx(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], dynamic_shapes: Any) -> bytes:
    """The serialized ONNX model; the exporter's chatter goes to the debug log, not the user's terminal."""
    chatter = io.StringIO()
    quiet = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in quiet]
    try:
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(chatter), torch.no_grad():
            program = torch.onnx.export(
                module, example_inputs, dynamo=True, dynamic_shapes=dynamic_shapes, optimize=True, verbose=False
            )
        return program.model_proto.SerializeToString()
    except Exception as error:
        logging.getLogger(__name__).debug("ONNX export output:\n%s", chatter.getvalue())
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BenchError(f"ONNX export of the module failed ({message}); leave onnxruntime out of --compare") from None
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
