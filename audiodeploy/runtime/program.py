"""Load and run a .pte with ExecuTorch's runtime (XNNPACK included): audiodeploy's one loader.

A program is loaded in three steps, each turning whatever goes wrong into a one-line
:class:`ProgramLoadError` that names the file, what is wrong and what to do:

1. :mod:`~audiodeploy.runtime.pte_check` checks the layout in Python: size, file identifier (and what the
   file is instead), extended header against the file length, flatbuffer root, segments;
2. unless the bytes are known to load (:mod:`~audiodeploy.runtime.verdicts`), a child process loads them first
   (:mod:`~audiodeploy.runtime.probe`, which says why: some damaged programs pass every check and still crash
   the runtime);
3. ExecuTorch loads them in this process, verified (``Verification.InternalConsistency``), and every method
   is loaded, which initializes the XNNPACK delegates: a damaged delegate payload is seen only then.

Bytes the caller made itself are no risk: ``Program(..., trusted=True)`` skips the probe, and
:func:`mark_verified` records bytes an exporter produced and ran, so that their later loads from disk skip it
too. Inputs are checked against what the method declares (:mod:`~audiodeploy.runtime.inputs`) before a run.
Loading and running are quiet: the runtime's log is captured (:mod:`~audiodeploy.runtime.runtime_log`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from audiodeploy._cache import cache_dir
from audiodeploy._files import read_user_file
from audiodeploy.errors import AudiodeployError
from audiodeploy.program.description import program_digest
from audiodeploy.runtime import probe, verdicts
from audiodeploy.runtime.inputs import ProgramInputError, TensorSpec, check_inputs, describe_specs, read_spec
from audiodeploy.runtime.pte_check import (
    EXPORT_AGAIN,
    GIVE_PTE,
    ProgramLoadError,
    check_data_bytes,
    check_program_bytes,
)
from audiodeploy.runtime.runtime_log import describe_runtime_error, runtime_log
from audiodeploy.runtime.verdicts import mark_verified
from audiodeploy.runtime.weight_cache import load_with_weight_cache

# The loader's names, and the public names of the modules it was split from (inputs, verdicts, runtime_log, the
# cache directory), which callers import from here.
__all__ = [
    "LoadedMethod",
    "Program",
    "ProgramInputError",
    "ProgramLoadError",
    "ProgramRunError",
    "TensorSpec",
    "cache_dir",
    "mark_verified",
    "runtime_log",
    "set_threadpool_size",
    "threadpool_size",
]


class ProgramRunError(AudiodeployError, RuntimeError):
    """The runtime failed while running a loaded program; the message (one line) says what it reported."""


def _runtime() -> Any:
    """ExecuTorch's runtime extension, imported on first use."""
    # `portable_lib` re-exports this extension, but first imports executorch.exir (about 5 s here, torchao
    # included) for a warning class; the extension itself needs only torch's libraries, loaded by `import torch`.
    import executorch.extension.pybindings._C as extension

    return extension


def threadpool_size() -> int:
    """The threads of ExecuTorch's threadpool (by default one per performant core)."""
    return int(_runtime()._threadpool_get_thread_count())


def set_threadpool_size(threads: int) -> None:
    """Resize ExecuTorch's threadpool: only before a program is loaded (the extension calls this "unsafe")."""
    _runtime()._unsafe_reset_threadpool(threads)


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

    def unload(self) -> None:
        """Drop the native methods, then the program (the bytes stay)."""
        self.methods.clear()
        self.program = None

    def __del__(self) -> None:
        self.unload()


class LoadedMethod:
    """One loaded method of a :class:`Program`."""

    def __init__(self, loaded: _Loaded, name: str, origin: str) -> None:
        self._loaded = loaded
        self.name = name
        self.origin = origin
        meta = loaded.methods[name].method_meta()
        self.inputs = tuple(read_spec(meta.input_tensor_meta, i) for i in range(meta.num_inputs()))
        self.outputs = tuple(read_spec(meta.output_tensor_meta, i) for i in range(meta.num_outputs()))
        self._where = f"{origin} ({name!r})"

    def run(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        """Check ``inputs`` against what the method takes, then :meth:`execute` it."""
        return self.execute(self.check_inputs(inputs))

    def check_inputs(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The inputs as the runtime takes them (contiguous CPU tensors), or :class:`ProgramInputError`."""
        return check_inputs(inputs, self.inputs, self._where)

    def execute(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        """Run the method on ``inputs`` as they are (the runtime still checks dtype, rank and size bounds).

        For timing loops; :meth:`run` checks the inputs first. Failures are one-line errors:
        :class:`ProgramInputError` for inputs the runtime refused, :class:`ProgramRunError` for the run.
        """
        native = self._loaded.methods[self.name]
        with runtime_log() as log:
            try:
                native.set_inputs(tuple(inputs))
            except Exception as error:  # the binding raises RuntimeError, TypeError or ValueError
                raise ProgramInputError(
                    f"{self._where} refused its inputs ({describe_runtime_error(error, log.getvalue())}); "
                    f"it takes {describe_specs(self.inputs)}"
                ) from None
            try:
                native.execute()
                return list(native.get_outputs())
            except Exception as error:
                raise ProgramRunError(
                    f"{self._where} failed while running ({describe_runtime_error(error, log.getvalue())}); "
                    "if the inputs are right, the program is damaged: export it again"
                ) from None


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
        key = None if self._sha256 is None else verdicts.verdict_key(self._sha256, loaded.data)
        with _data_file(loaded.data) as data_path:
            unknown = key is not None and not verdicts.known_to_load(key)
            refused = unknown and probe.probe_program(loaded.buffer, origin, data_path) is False
            self.weight_cache = self._load(loaded, data_path, refused=refused)
            """Whether XNNPACK packed each of the program's constants once, for all the operators that read it."""
        if key is not None:
            verdicts.remember_loaded(key)
        self._loaded = loaded
        with runtime_log():  # reading a method's meta can log too
            self._methods = {name: LoadedMethod(loaded, name, origin) for name in loaded.methods}

    def _load(self, loaded: _Loaded, data_path: str | None, *, refused: bool) -> bool:
        """Load the program and every method into ``loaded`` with XNNPACK's weight cache on where it suits the
        program (not in fp16), in this process; whether the cache is on.

        A program that packs one constant for two kinds of kernel is loaded again without the cache
        (:mod:`~audiodeploy.runtime.weight_cache` says why). One the probe saw ``refused`` is loaded without it, for
        the runtime's refusal: a delegate whose init fails leaves 1.5.1's cache unfinished, and the next program
        destroyed then logs so and keeps its packings.
        """
        if refused:
            self._load_methods(loaded, data_path)
            return False
        return load_with_weight_cache(lambda: self._load_methods(loaded, data_path), loaded.unload, loaded.buffer)

    def _load_methods(self, loaded: _Loaded, data_path: str | None) -> str:
        """Load the program and every method into ``loaded``; what the runtime logged. A refusal is a load error."""
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
        return log.getvalue()

    def _refused(self, what: str, error: BaseException, log: str) -> ProgramLoadError:
        """The load error for a refusal: ``what`` failed, what the runtime said, and the remedy its log points to."""
        remedy = EXPORT_AGAIN
        if "external_data_map is null" in log:
            remedy = "its constants are in a .ptd file: give that file too (`data_path`)"
        elif re.search(r"Backend \S+ is not registered", log):
            remedy = "this ExecuTorch runtime lacks the backend the program was lowered for"
        return ProgramLoadError(
            f"{self.origin} is not a loadable ExecuTorch program: {what} "
            f"({describe_runtime_error(error, log)}); {remedy}"
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
        """The program's methods, sorted."""
        return sorted(self._methods)

    def method(self, name: str = "forward") -> LoadedMethod:
        """The loaded method ``name``; :class:`ProgramInputError` if the program has none of that name."""
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
    """The file's bytes; a file that cannot be read is a load error naming it (as ``shown``) and the remedy."""
    return read_user_file(path, shown, what, remedy, ProgramLoadError)
