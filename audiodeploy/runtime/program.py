"""Load and run a .pte with ExecuTorch's runtime (XNNPACK included): audiodeploy's one loader.

A program is loaded in three steps, each turning whatever goes wrong into a one-line
:class:`ProgramLoadError` that names the file, what is wrong and what to do:

1. :mod:`~audiodeploy.runtime.pte_check` checks the layout in Python: size, file identifier (and what the
   file is instead), extended header against the file length, flatbuffer root, segments;
2. unless the bytes are known to load (see below), a child process loads them first
   (:mod:`~audiodeploy.runtime._probe`);
3. ExecuTorch loads them in this process, verified (``Verification.InternalConsistency``), and every method
   is loaded, which initializes the XNNPACK delegates: a damaged delegate payload is seen only then.

Why a child process first (measured with ExecuTorch 1.5.1). Fuzzing a Conv1d+Linear program with one
XNNPACK delegate (``tests/runtime/test_program_fuzz.py``'s mutants, 4 seeds x 300: truncations and 1-4 byte
flips biased to the header, the flatbuffer, the delegate payload and the constants), each mutant loaded
in-process as step 3 does, killed the interpreter 32 times out of 1,200. The checks of step 1 catch 4 (a
non-UTF-8 file identifier, which the runtime quotes in a log line). The other 28 pass them, and
ExecuTorch's verification, and still crash, for reasons no check in Python can rule out short of
re-implementing the runtime's readers:

- 24 ``SIGABRT``: a damaged name that the runtime quotes in a log line (22 inside the XNNPACK payload,
  ``[XNNCompiler.cpp:258]``, 2 in the program's flatbuffer). pybind11's redirection of the log to
  ``sys.stderr`` raises ``UnicodeDecodeError`` where nothing can catch it, and the process aborts, as it did
  on any ``.wav`` before the identifier check;
- 3 ``SIGSEGV`` inside XNNPACK, which reads its payload's flatbuffer without a verifier;
- 1 ``SIGABRT`` from an assertion: a table that the flatbuffer verifier accepts but the loader needs
  (``Missing outputs field``, then ``Result::get()`` on an error).

So a child process loads the bytes first, and a child killed by a signal becomes a one-line
ProgramLoadError. With the probe, no mutant kills the caller: those 28 are reported as "the ExecuTorch
runtime crashed while loading ...". Costs, on this machine (2 cores): the probe server
(:mod:`~audiodeploy.runtime._probe`, an interpreter that imports only ExecuTorch's extension) starts in
about 0.6 s, on a process's first probe. Each probe after that is a fork and a load, about 15 ms for a
small program. The verdict is cached by the SHA-256 of the bytes (and of the runtime's extension file), in
memory and on disk (:func:`cache_dir`; an unwritable cache only means no caching, with one warning when
``$AUDIODEPLOY_CACHE_DIR`` chose it), so a program is probed once per machine. A load with a cached verdict
pays the hash, about 1 ms per MiB. Bytes the caller made itself are no risk: ``Program(..., trusted=True)``
skips the probe, and :func:`mark_verified` records bytes an exporter produced and ran, so that their later
loads from disk skip it too. Only loading is covered:
a damaged program that loads may still compute garbage or take long when run (in an exploration that also ran
the mutants that loaded, none crashed; one ran for 34 s instead of microseconds).

Loading and running are quiet: the runtime's log lines (the five ``[cpuinfo_utils.cpp:...]`` lines of the
first load among them) are logged at DEBUG on the ``audiodeploy.runtime`` logger instead of printed.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from audiodeploy._cache import CACHE_DIR_VARIABLE, cache_dir, unwritable_cache_message
from audiodeploy.errors import AudiodeployError
from audiodeploy.program.description import program_digest
from audiodeploy.runtime.pte_check import (
    EXPORT_AGAIN,
    GIVE_PTE,
    ProgramLoadError,
    check_data_bytes,
    check_program_bytes,
)

__all__ = [
    "LoadedMethod",
    "Program",
    "ProgramInputError",
    "ProgramLoadError",
    "ProgramRunError",
    "TensorSpec",
    "cache_dir",
    "mark_verified",
]

logger = logging.getLogger("audiodeploy.runtime")

_EXTENSION = "executorch.extension.pybindings._C"

_ERROR_NAMES = {
    0x01: "Internal",
    0x02: "InvalidState",
    0x04: "AlreadyLoaded",
    0x10: "NotSupported",
    0x11: "NotImplemented",
    0x12: "InvalidArgument",
    0x13: "InvalidType",
    0x14: "OperatorMissing",
    0x20: "NotFound",
    0x21: "MemoryAllocationFailed",
    0x22: "AccessFailed",
    0x23: "InvalidProgram",
    0x24: "InvalidExternalData",
    0x25: "OutOfResources",
    0x30: "DelegateInvalidCompatibility",
    0x31: "DelegateMemoryAllocationFailed",
    0x32: "DelegateInvalidHandle",
}
"""``executorch/runtime/core/error.h``."""

_SCALAR_TYPES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
    8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 12: "qint8", 13: "quint8", 14: "qint32",
    15: "bfloat16", 23: "float8_e5m2", 24: "float8_e4m3fn", 25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz",
    27: "uint16", 28: "uint32", 29: "uint64",
}  # fmt: skip
"""ExecuTorch's ``ScalarType`` codes (c10's numbering) -> torch dtype names."""


class ProgramInputError(AudiodeployError, ValueError):
    """Inputs the program does not take (count, dtype, rank, size, values); the message names the input."""


class ProgramRunError(AudiodeployError, RuntimeError):
    """The runtime failed while running a loaded program; the message (one line) says what it reported."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a method, as the program declares it."""

    dtype: torch.dtype | None
    """None for a value that is not a tensor (or of a dtype torch does not have)."""
    sizes: tuple[int, ...]
    """The sizes; for a dynamic axis its upper bound."""
    scalar_type: int | None
    """ExecuTorch's dtype code (6 is float32), as native runners take it."""

    def __str__(self) -> str:
        if self.scalar_type is None:
            return "a non-tensor value"
        name = str(self.dtype).removeprefix("torch.") if self.dtype is not None else f"dtype {self.scalar_type}"
        return f"{name} {list(self.sizes)}"


# --- where the runtime's log goes ---------------------------------------------------------------------------


@contextlib.contextmanager
def runtime_log() -> Iterator[io.StringIO]:
    """Collect what the runtime logs during the block and re-emit it at DEBUG on ``audiodeploy.runtime``.

    Where the lines come from (1.5.1, measured): the runtime's log (``ET_LOG``) is written to
    ``std::cerr``, and every binding of the extension carries pybind11's ``scoped_estream_redirect`` /
    ``scoped_ostream_redirect`` call guard, which forwards ``std::cerr`` and ``std::cout`` to Python's
    ``sys.stderr`` and ``sys.stdout``. They do not come through Python ``logging`` and nothing is written
    to fd 2 directly: with ``sys.stderr`` swapped, an fd-2 capture of loading (and of the fuzzed loads)
    stays empty. So swapping the Python streams is all it takes; no ``dup2`` of fd 2. The swap is
    process-wide: what another thread prints meanwhile is collected (and logged) too.
    """
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            yield captured
    finally:
        _log_lines(captured.getvalue())


def _log_lines(text: str) -> None:
    for line in text.splitlines():
        if line.strip():
            logger.debug("executorch: %s", line)


def _runtime() -> Any:
    # `portable_lib` re-exports this extension, but first imports executorch.exir (about 5 s here, torchao
    # included) for a warning class; the extension itself needs only torch's libraries, loaded by `import torch`.
    import executorch.extension.pybindings._C as extension

    return extension


def _detail(error: BaseException, log: str) -> str:
    """What the runtime said, on one line: the error's name (from its code, else its message) and the last
    line it logged."""
    message = " ".join(str(error).split()) or type(error).__name__
    code = re.search(r"error:? 0x:?([0-9a-fA-F]+)", message)
    head = _ERROR_NAMES.get(int(code.group(1), 16), f"error 0x{code.group(1)}") if code else message
    lines = [re.sub(r"^\[[^\]]*\]\s*", "", line).strip() for line in log.splitlines()]
    chatter = ("Reading file", "Failed to open midr", "CPU info")  # cpuinfo's start-up lines say nothing here
    lines = [line for line in lines if line and not line.startswith(chatter)]
    said = lines[-1] if lines else ""
    text = f"{head}: {said}" if said and said not in head else head
    return text if len(text) <= 200 else text[:197] + "..."


# --- the verdict cache ----------------------------------------------------------------------------------------

_KNOWN_TO_LOAD: set[str] = set()
"""Keys of programs that loaded in this process or its cache: they need no probe."""


@functools.lru_cache(maxsize=1)
def _runtime_identity() -> bytes:
    """The extension file's path, size and time: a verdict holds for the runtime that gave it."""
    try:
        spec = importlib.util.find_spec(_EXTENSION)
        origin = spec.origin if spec is not None else None
        stat = os.stat(origin) if origin else None
    except (ImportError, OSError, ValueError):
        return b"unknown runtime"
    return f"{origin}:{stat.st_size}:{stat.st_mtime_ns}".encode() if stat else b"unknown runtime"


def _program_key(program_sha256: str, data: bytes | None) -> str:
    """The verdict's key: the program's SHA-256 (the one its sidecar records), its data and the runtime."""
    digest = hashlib.sha256(_runtime_identity() + b"\0program\0" + program_sha256.encode())
    if data is not None:
        digest.update(b"\0data\0")
        digest.update(data)
    return digest.hexdigest()


def _marker(key: str) -> Path | None:
    directory = cache_dir()
    return directory / "verified-programs" / key if directory is not None else None


def _known_to_load(key: str) -> bool:
    if key in _KNOWN_TO_LOAD:
        return True
    marker = _marker(key)
    try:
        found = marker is not None and marker.is_file()
    except OSError:
        found = False
    if found:
        _KNOWN_TO_LOAD.add(key)
    return found


def _remember(key: str) -> None:
    _KNOWN_TO_LOAD.add(key)
    marker = _marker(key)
    if marker is None:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError as error:
        _cache_unwritable(error)


_warned_cache_dir = False


def _cache_unwritable(error: OSError) -> None:
    """Say once that verdicts are not cached. Caching only saves time, so a load goes on; but a cache the user
    chose with the variable deserves a word, since every later load then probes its program again."""
    global _warned_cache_dir
    directory = cache_dir()
    if directory is None:
        return
    message = unwritable_cache_message(directory, error)
    if _warned_cache_dir or not os.environ.get(CACHE_DIR_VARIABLE):
        logger.debug("not caching the load verdict: %s", message)
        return
    _warned_cache_dir = True
    logger.warning("%s; until then every load of a program checks it in a child process first", message)


def mark_verified(buffer: bytes, data: bytes | None = None) -> None:
    """Record that these program bytes (with this .ptd data, if any) load without crashing the runtime.

    For an exporter, for bytes it produced and ran itself: later loads of them, from any process, skip the
    child-process probe.
    """
    _remember(_program_key(program_digest(bytes(buffer)), None if data is None else bytes(data)))


# --- the probe --------------------------------------------------------------------------------------------------


class _ProbeServer:
    """The :mod:`~audiodeploy.runtime._probe` server of this process, started on first use.

    One server per process (a forked process starts its own), used under a lock; a server that is gone
    (idle timeout, killed) is started again once per request.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pid = 0
        self._unavailable: str | None = None

    def _start(self) -> subprocess.Popen[bytes] | None:
        # The server finds ExecuTorch where this process found it, whatever sys.path tweaks led there.
        spec = importlib.util.find_spec("executorch")
        roots = [os.path.dirname(location) for location in (spec.submodule_search_locations or [])] if spec else []
        try:
            process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("_probe.py")), *roots],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as error:
            self._unavailable = f"cannot start {sys.executable!r} ({error})"
            return None
        assert process.stdout is not None
        try:
            ready = json.loads(process.stdout.readline() or b"{}")
        except ValueError:
            ready = {}
        if not ready.get("ready"):
            self._unavailable = str(ready.get("error") or "the probe server did not start")
            process.kill()
            process.wait()
            return None
        self._process, self._pid = process, os.getpid()
        return process

    def _current(self) -> subprocess.Popen[bytes] | None:
        if self._unavailable is not None or not sys.executable:
            return None
        process = self._process
        if process is None or self._pid != os.getpid() or process.poll() is not None:
            return self._start()
        return process

    def probe(self, buffer: bytes, data_path: str | None) -> dict | None:
        """The child's verdict (see :mod:`~audiodeploy.runtime._probe`), or None if no child can tell."""
        path = (data_path or "").encode()
        with self._lock:
            for _ in range(2):
                process = self._current()
                if process is None:
                    logger.debug("no load probe (%s): loading unprobed", self._unavailable or "no Python executable")
                    return None
                assert process.stdin is not None and process.stdout is not None
                try:
                    process.stdin.write(struct.pack("<QI", len(buffer), len(path)) + path)
                    process.stdin.write(buffer)
                    process.stdin.flush()
                    line = process.stdout.readline()
                except OSError:
                    line = b""
                if line:
                    try:
                        return json.loads(line)
                    except ValueError:
                        pass
                self.stop()
            return None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or self._pid != os.getpid():
            return
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_PROBE_SERVER = _ProbeServer()
atexit.register(_PROBE_SERVER.stop)


def _probe(buffer: bytes, origin: str, data_path: str | None) -> bool | None:
    """Load ``buffer`` in a child process first: True if it loaded there, False if the runtime refused it (the
    caller then gets the refusal by loading it itself, safely), None if no child could tell. Raises
    :class:`ProgramLoadError` when the child was killed by a signal."""
    verdict = _PROBE_SERVER.probe(buffer, data_path)
    if verdict is None:
        return None
    _log_lines(str(verdict.get("log", "")))
    if verdict.get("signal") is not None:
        number = int(verdict["signal"])
        try:
            how = signal.Signals(number).name
        except ValueError:
            how = f"signal {number}"
        raise ProgramLoadError(
            f"the ExecuTorch runtime crashed while loading {origin} ({how}): the file is corrupt; export it again"
        )
    return bool(verdict.get("loaded"))


# --- programs and methods ---------------------------------------------------------------------------------------


class _Loaded:
    """The native program and methods, and the bytes they read from.

    The runtime reads from the caller's buffer (it does not copy it), so the bytes must outlive every
    native object: only this holder owns those, and it drops the methods, then the program, then the bytes.
    """

    def __init__(self, buffer: bytes, data: bytes | None) -> None:
        self.buffer = buffer
        self.data = data
        self.program: Any = None
        self.methods: dict[str, Any] = {}

    def __del__(self) -> None:
        self.methods.clear()
        self.program = None


class LoadedMethod:
    """One loaded method of a :class:`Program`."""

    def __init__(self, loaded: _Loaded, name: str, origin: str) -> None:
        self._loaded = loaded
        self.name = name
        self.origin = origin
        meta = loaded.methods[name].method_meta()
        self.inputs = tuple(_spec(meta.input_tensor_meta, i) for i in range(meta.num_inputs()))
        self.outputs = tuple(_spec(meta.output_tensor_meta, i) for i in range(meta.num_outputs()))

    def _takes(self) -> str:
        return ", ".join(str(spec) for spec in self.inputs) or "no inputs"

    def run(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        """Check ``inputs`` against what the method takes, then :meth:`execute` it."""
        return self.execute(self.check_inputs(inputs))

    def check_inputs(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The inputs as the runtime takes them (contiguous CPU tensors), or :class:`ProgramInputError`."""
        where = f"{self.origin} ({self.name!r})"
        takes = f"it takes {len(self.inputs)}: {self._takes()}"
        if isinstance(inputs, (torch.Tensor, str, bytes)) or not isinstance(inputs, Sequence):
            raise ProgramInputError(
                f"{where}: give the inputs as a sequence (tuple or list) of tensors, "
                f"not a {type(inputs).__name__}; {takes}"
            )
        if len(inputs) != len(self.inputs):
            raise ProgramInputError(f"{where} got {len(inputs)} input(s); {takes}")
        checked = []
        for i, (value, spec) in enumerate(zip(inputs, self.inputs)):
            wanted = f"{where} takes {spec} as input {i}"
            if spec.scalar_type is None:
                raise ProgramInputError(
                    f"{where}: input {i} is not a tensor input; audiodeploy runs tensor inputs only"
                )
            if not isinstance(value, torch.Tensor):
                raise ProgramInputError(f"input {i} is a {type(value).__name__}, not a tensor; {wanted}")
            got = f"input {i} is {str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
            if value.is_complex():
                raise ProgramInputError(f"{got}: complex tensors are not taken; {wanted}")
            if value.dtype != spec.dtype:
                raise ProgramInputError(f"{got}; {wanted} (convert it: `.to({spec.dtype})`)")
            if value.dim() != len(spec.sizes):
                raise ProgramInputError(f"{got}, {value.dim()} axes; {wanted}, {len(spec.sizes)} axes")
            over = [axis for axis, (size, bound) in enumerate(zip(value.shape, spec.sizes)) if size > bound]
            if over:
                axis = over[0]
                raise ProgramInputError(
                    f"{got}: axis {axis} has {value.shape[axis]}, the program takes at most {spec.sizes[axis]}; "
                    f"{wanted} (sizes are upper bounds)"
                )
            if value.device.type != "cpu":
                raise ProgramInputError(f"{got} on {value.device}; {wanted} on the CPU (`.cpu()`)")
            if value.is_floating_point():
                finite = torch.isfinite(value)
                if not bool(finite.all()):
                    nan = int(torch.isnan(value).sum())
                    raise ProgramInputError(
                        f"{got} with {nan} NaN and {int((~finite).sum()) - nan} infinite value(s); "
                        f"{wanted} with finite values"
                    )
            checked.append(value.detach().contiguous())
        return tuple(checked)

    def execute(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        """Run the method on ``inputs`` as they are (the runtime still checks dtype, rank and size bounds).

        For timing loops; :meth:`run` checks the inputs first. Failures are one-line errors:
        :class:`ProgramInputError` for inputs the runtime refused, :class:`ProgramRunError` for the run.
        """
        native = self._loaded.methods[self.name]
        where = f"{self.origin} ({self.name!r})"
        with runtime_log() as log:
            try:
                native.set_inputs(tuple(inputs))
            except Exception as error:  # the binding raises RuntimeError, TypeError or ValueError
                raise ProgramInputError(
                    f"{where} refused its inputs ({_detail(error, log.getvalue())}); it takes {self._takes()}"
                ) from None
            try:
                native.execute()
                return list(native.get_outputs())
            except Exception as error:
                raise ProgramRunError(
                    f"{where} failed while running ({_detail(error, log.getvalue())}); "
                    "if the inputs are right, the program is damaged: export it again"
                ) from None


def _spec(read: Any, index: int) -> TensorSpec:
    try:
        info = read(index)
    except Exception:  # not a tensor (an int or a bool input)
        return TensorSpec(None, (), None)
    code = int(info.dtype())
    name = _SCALAR_TYPES.get(code)
    return TensorSpec(getattr(torch, name, None) if name else None, tuple(int(s) for s in info.sizes()), code)


class Program:
    """A loaded ExecuTorch program, every method loaded.

    ``Program(buffer, origin=..., data=...)`` loads .pte bytes (and the bytes of the .ptd holding its external
    constants, if it has one); ``origin`` names them in messages. ``trusted=True`` is for bytes the caller
    has just produced (``audiodeploy.lower``): they skip the child-process probe, not the checks.
    :meth:`load` reads them from files.
    """

    def __init__(
        self,
        buffer: bytes,
        origin: str = "<bytes>",
        data: bytes | None = None,
        *,
        trusted: bool = False,
        data_origin: str | None = None,
    ) -> None:
        self.origin = origin
        loaded = _Loaded(bytes(buffer), None if data is None else bytes(data))
        check_program_bytes(loaded.buffer, origin)
        if loaded.data is not None:
            check_data_bytes(loaded.data, data_origin or f"the data of {origin}")
        # Hashed once: the verdict's key and the sidecar's check (`sha256`) share it.
        self._sha256 = None if trusted else program_digest(loaded.buffer)
        key = None if self._sha256 is None else _program_key(self._sha256, loaded.data)
        with _data_file(loaded.data) as data_path:
            if key is not None and not _known_to_load(key):
                _probe(loaded.buffer, origin, data_path)
            self._load(loaded, data_path)
        if key is not None:
            _remember(key)
        self._loaded = loaded
        with runtime_log():  # reading a method's meta can log too
            self._methods = {name: LoadedMethod(loaded, name, origin) for name in loaded.methods}

    def _load(self, loaded: _Loaded, data_path: str | None) -> None:
        runtime = _runtime()
        with runtime_log() as log:
            try:
                loaded.program = runtime._load_program_from_buffer(
                    loaded.buffer, program_verification=runtime.Verification.InternalConsistency, data_path=data_path
                )
                names = [loaded.program.get_method_name(i) for i in range(loaded.program.num_methods())]
            except Exception as error:  # RuntimeError from the runtime, UnicodeDecodeError from a damaged name
                raise self._refused("ExecuTorch's verification refused it", error, log.getvalue()) from None
            for name in names:
                try:
                    loaded.methods[name] = loaded.program.load_method(name)
                except Exception as error:
                    raise self._refused(f"its method {name!r} does not load", error, log.getvalue()) from None

    def _refused(self, what: str, error: BaseException, log: str) -> ProgramLoadError:
        remedy = EXPORT_AGAIN
        if "external_data_map is null" in log:
            remedy = "its constants are in a .ptd file: give that file too (`data_path`)"
        elif re.search(r"Backend \S+ is not registered", log):
            remedy = "this ExecuTorch runtime lacks the backend the program was lowered for"
        return ProgramLoadError(
            f"{self.origin} is not a loadable ExecuTorch program: {what} ({_detail(error, log)}); {remedy}"
        )

    @classmethod
    def load(
        cls,
        path: str | bytes | os.PathLike[str],
        data_path: str | bytes | os.PathLike[str] | None = None,
        *,
        trusted: bool = False,
    ) -> Program:
        """Load a .pte, and the .ptd holding its external constants if it has one."""
        shown = _display(path)
        buffer = _read(path, shown, "program", GIVE_PTE)
        data = None
        shown_data = None
        if data_path is not None:
            shown_data = _display(data_path)
            data = _read(data_path, shown_data, "data file", "give the .ptd written with the .pte")
        return cls(buffer, origin=shown, data=data, trusted=trusted, data_origin=shown_data)

    @property
    def buffer(self) -> bytes:
        """The program's bytes (the runtime reads from them; they live as long as the program)."""
        return self._loaded.buffer

    @property
    def sha256(self) -> str:
        """The SHA-256 of :attr:`buffer` in hex, as a sidecar records it (computed once)."""
        if self._sha256 is None:
            self._sha256 = program_digest(self._loaded.buffer)
        return self._sha256

    @property
    def method_names(self) -> list[str]:
        return sorted(self._methods)

    def method(self, name: str = "forward") -> LoadedMethod:
        try:
            return self._methods[name]
        except KeyError:
            raise ProgramInputError(
                f"{self.origin} has no method {name!r}; it has {', '.join(self.method_names)}"
            ) from None

    def input_specs(self, method: str = "forward") -> list[TensorSpec]:
        """Dtype and sizes (upper bounds, for dynamic shapes) of each input of ``method``."""
        return list(self.method(method).inputs)

    def output_specs(self, method: str = "forward") -> list[TensorSpec]:
        """Dtype and sizes (upper bounds, for dynamic shapes) of each output of ``method``."""
        return list(self.method(method).outputs)

    def run(self, inputs: Sequence[torch.Tensor], method: str = "forward") -> list[Any]:
        """Check ``inputs`` against the method's declaration, run it, return its outputs.

        :class:`ProgramInputError` names the input that is not what the method takes (count, dtype, rank,
        a size above its bound, NaN or infinite values, complex or non-tensor values);
        :class:`ProgramRunError` reports a failure of the run itself.
        """
        return self.method(method).run(inputs)


@contextlib.contextmanager
def _data_file(data: bytes | None) -> Iterator[str | None]:
    """The runtime takes a program's external data by path only: the checked bytes, in a private file.

    The file is removed once the methods are loaded: the runtime keeps it open (or mapped) and has read
    what loading needs."""
    if data is None:
        yield None
        return
    directory = tempfile.mkdtemp(prefix="audiodeploy-ptd-")
    try:
        path = os.path.join(directory, "data.ptd")
        with open(path, "wb") as file:
            file.write(data)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _display(path: str | bytes | os.PathLike[Any]) -> str:
    """The path as it can be printed on one line: bytes that are not UTF-8 and control characters as escapes."""
    raw = os.fspath(path)
    if isinstance(raw, bytes):
        text = raw.decode("utf-8", "backslashreplace")
    else:
        errors = "surrogateescape" if _only_escapes(raw) else "backslashreplace"
        text = raw.encode("utf-8", errors).decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _only_escapes(text: str) -> bool:
    """Whether every surrogate in ``text`` is one of ``os.fsdecode``'s escapes of an undecodable byte."""
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in text)


def _read(path: str | bytes | os.PathLike[Any], shown: str, what: str, remedy: str) -> bytes:
    try:
        return Path(os.fsdecode(path)).read_bytes()
    except FileNotFoundError:
        raise ProgramLoadError(f"{shown}: no such file; {remedy}") from None
    except IsADirectoryError:
        raise ProgramLoadError(f"{shown} is a directory, not a {what}; {remedy}") from None
    except PermissionError:
        raise ProgramLoadError(f"{shown}: permission denied; make the {what} readable or copy it") from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ProgramLoadError(f"{shown}: cannot read the {what} ({reason}); {remedy}") from None
    except (UnicodeError, ValueError) as error:  # a name the file system cannot take (a NUL, a lone surrogate)
        raise ProgramLoadError(f"{shown}: not a usable file name ({type(error).__name__}); {remedy}") from None
