"""Run a built runner: on this machine (host), under ``qemu-aarch64`` (linux-aarch64, with the cross toolchain's
sysroot as ``QEMU_LD_PREFIX``) or through the bundle's own loader (android-arm64, with an empty
``QEMU_LD_PREFIX``: nothing from the host's arm64 sysroot is used, as on a phone).

Inputs go to the runner as raw files of their own dtypes, its JSON report is read (:class:`RunnerReport`, whose JSON Schema
is checked in as ``audiodeploy/program/schemas/runner-report.schema.json``), and its outputs are read back as
tensors. The pieces (:func:`write_inputs`, :func:`runner_arguments`, :func:`parse_report`, :func:`read_outputs`)
are separate so a transport that runs the runner elsewhere (adb, ssh) reuses them with its own paths.

torch is imported by the functions that make tensors, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from audiodeploy.native import tools
from audiodeploy.native.build import RUNNER_NAME, BuiltRunner
from audiodeploy.native.errors import NativeError
from audiodeploy.program.records import Record

if TYPE_CHECKING:
    import torch

REPORT_SCHEMA: Final = "audiodeploy.runner/1"
OUTPUTS_SCHEMA = "audiodeploy.runner.outputs/1"
Fill = Literal["zeros", "seeded"]
Shape = tuple[int, ...]

_NUMPY_DTYPES = {
    "float32": "<f4", "float64": "<f8", "float16": "<f2",
    "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1", "uint8": "u1", "bool": "?",
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LoadTimes(Record):
    """How long the runner took to load the program and its method, in milliseconds."""

    program: float
    method: float
    """Loading the method: XNNPACK packs its weights then."""
    total: float


@dataclass(frozen=True, kw_only=True)
class RunnerCpu(Record):
    """The CPU the runner ran on, as it saw it."""

    model: str
    """``AMD EPYC ...``, or ``ARM implementer 0x41 part 0xd0b`` on arm64."""
    architecture: str
    """What the runner was compiled for."""
    machine: str
    """``uname -m``: what the kernel (or qemu-user) says it runs on."""
    cores: int


@dataclass(frozen=True, kw_only=True)
class RunnerInput(Record):
    """One input the runner fed: its shape, and whether it was read from a file or filled."""

    shape: tuple[int, ...]
    dtype: str
    """The method's, which a file must hold (``float32``, ``int64``, ...)."""
    source: Literal["file", "zeros", "seeded"]


@dataclass(frozen=True, kw_only=True)
class RunnerOutput(Record):
    """One output of the method's last execution."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, kw_only=True)
class RunnerReport(Record):
    """The JSON report the C++ runner prints on stdout (schema ``audiodeploy.runner/1``, written by
    ``report_json`` in ``runner/src/main.cpp``): what it loaded, how long that took, every timed execution, its
    peak memory, the CPU, the thread pool, and the shapes in and out."""

    schema: Literal["audiodeploy.runner/1"] = REPORT_SCHEMA
    executorch_version: str
    model: str
    data: str | None
    """The ``.ptd`` file given with ``--data``."""
    method: str
    load_ms: LoadTimes
    warmup: int
    iterations: int
    latencies_ms: tuple[float, ...]
    """Each timed execution in order (the warm-up ones are not timed)."""
    peak_rss_bytes: int
    """The process's peak resident memory (VmHWM, else getrusage)."""
    cpu: RunnerCpu
    threads: int
    """The size of the thread pool the program ran on."""
    inputs: tuple[RunnerInput, ...]
    outputs: tuple[RunnerOutput, ...]
    output_dir: str | None


@dataclass(frozen=True)
class NativeRun:
    report: RunnerReport
    """The runner's report."""
    outputs: list[torch.Tensor] = field(default_factory=list)
    wall_s: float = 0.0
    """The whole process, start to exit, as seen from here."""
    emulated: bool = False
    """Run under qemu: its latencies say nothing about real arm64 hardware."""
    emulated_cpu: str | None = None
    """The CPU model qemu emulated (``QEMU_CPU``), when emulated."""

    @property
    def latencies_ms(self) -> list[float]:
        return list(self.report.latencies_ms)


def is_emulated(built: BuiltRunner) -> bool:
    return built.target != "host" and platform.machine() not in ("aarch64", "arm64")


def runner_command(built: BuiltRunner) -> tuple[list[str], dict[str, str]]:
    """The command prefix that starts `built` on this machine, and the environment it needs."""
    environment = dict(os.environ)
    if not is_emulated(built):
        if built.target == "android-arm64":
            loader = built.directory / "ld-linux-aarch64.so.1"
            return [str(loader), "--library-path", str(built.directory), str(built.executable)], environment
        return [str(built.executable)], environment
    qemu = tools.require(tools.QEMU_AARCH64)
    environment["QEMU_CPU"] = tools.emulated_cpu(qemu)
    if built.target == "linux-aarch64":
        environment["QEMU_LD_PREFIX"] = str(tools.AARCH64_SYSROOT)
        return [qemu, str(built.executable)], environment
    # The bundle: qemu starts its loader, which finds every library in the bundle; an empty prefix makes sure
    # none comes from the host's arm64 sysroot.
    environment["QEMU_LD_PREFIX"] = ""
    loader = built.directory / "ld-linux-aarch64.so.1"
    return [qemu, str(loader), "--library-path", str(built.directory), str(built.executable)], environment


def write_inputs(inputs: Sequence[torch.Tensor], directory: Path) -> list[tuple[Path, Shape]]:
    """Each input as ``input_<i>.bin``, its elements' raw little-endian bytes in its own dtype, with its shape.
    The runner reads a file as the method's dtype: :func:`check_input_dtypes` compares the two after a run."""
    import torch

    written = []
    for index, tensor in enumerate(inputs):
        if not isinstance(tensor, torch.Tensor) or dtype_name(tensor) not in _NUMPY_DTYPES:
            kind = dtype_name(tensor) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise NativeError(f"input {index} is {kind}; the native runner feeds tensors of {', '.join(_NUMPY_DTYPES)}")
        path = Path(directory) / f"input_{index}.bin"
        # A byte view writes every dtype alike (numpy has no bfloat16); the runner is little-endian only.
        tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tofile(path)
        written.append((path, tuple(tensor.shape)))
    return written


def dtype_name(tensor: torch.Tensor) -> str:
    """``float32``, ``int64``, ...: a tensor's dtype as the runner's report names it."""
    return str(tensor.dtype).removeprefix("torch.")


def check_input_dtypes(report: RunnerReport, inputs: Sequence[torch.Tensor]) -> None:
    """The runner read each file as its method's dtype: one of another dtype (of the same element size, or the
    runner would have refused its size) was misread, so the run says nothing."""
    for index, (fed, tensor) in enumerate(zip(report.inputs, inputs, strict=True)):
        if fed.dtype != dtype_name(tensor):
            raise NativeError(
                f"input {index} is {dtype_name(tensor)} but method '{report.method}' takes {fed.dtype}: "
                f"convert it to {fed.dtype}"
            )


def format_shape(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape) if len(shape) else "scalar"


@dataclass(frozen=True)
class RunOptions:
    """How the runner runs a program, wherever it runs (here, over adb, over ssh): its command-line options."""

    method: str = "forward"
    fill: Fill | None = None
    """Fill the inputs (``zeros`` or ``seeded``) instead of reading input files."""
    fill_shapes: Sequence[Sequence[int]] = ()
    """With ``fill``: the input shapes (default: the method's upper bounds)."""
    seed: int = 0
    warmup: int = 1
    iterations: int = 10
    threads: int = 0
    """0 keeps the runtime's default."""


def runner_arguments(
    model: str | os.PathLike[str],
    input_files: Sequence[tuple[str | os.PathLike[str], Sequence[int]]] = (),
    options: RunOptions = RunOptions(),
    *,
    data: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """The runner's command-line arguments (paths as the runner will see them, wherever it runs)."""
    arguments = ["--model", os.fspath(model), "--method", options.method]
    if data is not None:
        arguments += ["--data", os.fspath(data)]
    for path, shape in input_files:
        arguments += ["--input", f"{os.fspath(path)}:{format_shape(shape)}"]
    if options.fill is not None:
        arguments += ["--fill", options.fill, "--seed", str(options.seed)]
        for shape in options.fill_shapes:
            arguments += ["--shape", format_shape(shape)]
    arguments += ["--warmup", str(options.warmup), "--iterations", str(options.iterations)]
    arguments += ["--threads", str(options.threads)]
    if output_dir is not None:
        arguments += ["--output-dir", os.fspath(output_dir)]
    return arguments


def parse_report(stdout: str) -> RunnerReport:
    """The runner's JSON report from its stdout, read through `RunnerReport`."""
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError as error:
        raise NativeError(
            f"the runner's output is not its JSON report ({error.msg} at character {error.pos})"
        ) from None
    if not isinstance(report, dict) or report.get("schema") != REPORT_SCHEMA:
        schema = report.get("schema") if isinstance(report, dict) else None
        raise NativeError(f"the runner's report is not {REPORT_SCHEMA}: schema {schema!r}")
    try:
        return RunnerReport.from_dict(report)
    except ValueError as error:
        raise NativeError(
            f"the runner's report is malformed ({error}); rebuild the runner: audiodeploy runner build"
        ) from None


def read_outputs(directory: Path) -> list[torch.Tensor]:
    """The tensors a runner wrote with ``--output-dir`` (manifest.json and output_<i>.bin)."""
    import numpy as np
    import torch

    manifest_path = Path(directory) / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise NativeError(f"cannot read the runner's output manifest {manifest_path}: {error}") from None
    if manifest.get("schema") != OUTPUTS_SCHEMA:
        raise NativeError(f"{manifest_path} is not {OUTPUTS_SCHEMA}")
    outputs = []
    for entry in manifest["outputs"]:
        dtype = _NUMPY_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise NativeError(f"output {entry['file']} has dtype {entry['dtype']}, which cannot be read back")
        shape = tuple(entry["shape"])
        values = np.fromfile(Path(directory) / entry["file"], dtype=dtype)
        if values.size != int(np.prod(shape, dtype=np.int64)):
            raise NativeError(f"output {entry['file']} holds {values.size} values, its shape {shape} needs more")
        outputs.append(torch.from_numpy(values.reshape(shape).astype(dtype.lstrip("<"), copy=True)))
    return outputs


def run_runner(
    built: BuiltRunner,
    model: str | os.PathLike[str],
    inputs: Sequence[torch.Tensor] | None = None,
    options: RunOptions = RunOptions(),
    *,
    data: str | os.PathLike[str] | None = None,
    keep_outputs: bool = True,
    timeout_s: float | None = None,
) -> NativeRun:
    """Run `model` with `inputs` (or `options.fill`) on `built` here, and return its report and outputs."""
    if inputs is not None and options.fill is not None:
        raise NativeError("give inputs or fill, not both")
    prefix, environment = runner_command(built)
    with tempfile.TemporaryDirectory(prefix="audiodeploy-runner-") as scratch:
        work = Path(scratch)
        input_files = write_inputs(inputs, work) if inputs is not None else []
        output_dir = work / "outputs" if keep_outputs else None
        arguments = runner_arguments(
            Path(model).resolve(), input_files, options,
            data=Path(data).resolve() if data is not None else None, output_dir=output_dir,
        )  # fmt: skip
        start = time.monotonic()
        try:
            done = subprocess.run(
                prefix + arguments, capture_output=True, text=True, env=environment, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise NativeError(f"the {built.target} runner did not finish within {timeout_s:g} s") from None
        except OSError as error:
            raise NativeError(f"cannot start the {built.target} runner {prefix[-1]}: {error.strerror}") from None
        wall_s = time.monotonic() - start
        if done.returncode != 0:
            raise NativeError(f"the {built.target} runner failed: {runner_error_line(done.stderr, done.returncode)}")
        report = parse_report(done.stdout)
        if inputs is not None:
            check_input_dtypes(report, inputs)
        outputs = read_outputs(output_dir) if output_dir is not None else []
    return NativeRun(
        report=report, outputs=outputs, wall_s=wall_s, emulated=is_emulated(built),
        emulated_cpu=environment.get("QEMU_CPU") if is_emulated(built) else None,
    )  # fmt: skip


def runner_error_line(stderr: str, returncode: int) -> str:
    """The runner's one ``error: ...`` line (without the prefix), else what explains its exit status."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line[len("error: ") :]
    if returncode < 0:
        return f"killed by signal {-returncode}" + (f" ({lines[-1]})" if lines else "")
    return lines[-1] if lines else f"exit status {returncode}, no message"


__all__ = [
    "RUNNER_NAME",
    "LoadTimes",
    "NativeRun",
    "RunOptions",
    "RunnerCpu",
    "RunnerInput",
    "RunnerOutput",
    "RunnerReport",
    "check_input_dtypes",
    "is_emulated",
    "parse_report",
    "read_outputs",
    "run_runner",
    "runner_arguments",
    "runner_command",
    "runner_error_line",
    "write_inputs",
]
