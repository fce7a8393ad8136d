"""Writing the user's files safely: a reader never sees a partial file, a failure or a signal leaves the previous
files as they were and no temporary file behind, and a target that cannot be written is found before the work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


class OutputPathError(ValueError):
    """A target that cannot or must not be written; the message names it and what to do."""


# The signals a user (Ctrl-C, `kill`, a closed terminal) sends to stop a command; while a group of files is
# renamed into place they wait, so the group is replaced whole or not at all.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}


def display(path: str | os.PathLike[str]) -> str:
    """A path as it can be printed, whatever bytes its name holds."""
    return os.fsdecode(path).encode("utf-8", "backslashreplace").decode("utf-8")


def check_writable(path: str | os.PathLike[str], option: str = "-o") -> Path:
    """Raise `OutputPathError` unless a file can be created at `path` now (by creating and removing one beside it).

    Catches a missing or read-only directory, a directory in the way, a file system that takes no new files
    (/proc), and a name that is not text, before any slow work starts.
    """
    path = Path(path)
    shown = display(path)
    try:
        os.fsdecode(path).encode("utf-8")
    except UnicodeEncodeError:
        raise OutputPathError(f"cannot write {shown}: its name is not valid UTF-8 text; give {option} another name") from None
    if path.is_dir():
        raise OutputPathError(f"{shown} is a directory; give {option} a file name, e.g. {display(path / 'out')}")
    parent = path.parent
    if not parent.is_dir():
        raise OutputPathError(f"cannot write {shown}: directory {display(parent)} does not exist; create it or change {option}")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
    except OSError as error:
        raise OutputPathError(f"cannot write {shown}: {error.strerror or error}; change {option}") from None
    os.close(fd)
    os.unlink(probe)
    return path


def refuse_overwrite(output: Path, protected: Sequence[tuple[Path, str]], option: str = "-o") -> None:
    """Raise `OutputPathError` when `output` is one of the `protected` files (path, what it is)."""
    for path, what in protected:
        if _same_file(output, path):
            raise OutputPathError(
                f"{option} {display(output)} would overwrite {what}; give {option} another name"
            )


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.abspath(a) == os.path.abspath(b)


@contextlib.contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """Hold the stop signals for the duration of the block (main thread only; elsewhere a no-op)."""
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _temporary_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return Path(name)


def atomic_write_files(files: Mapping[Path, bytes]) -> None:
    """Write every ``path: bytes`` of `files` so that all of them change, or none.

    Each file is written to a temporary file beside its target and flushed to disk; only when all are written
    are they renamed into place, with the stop signals held, so an interruption or a failure while writing
    (a full disk) leaves the previous files untouched and no temporary file.
    """
    temporaries: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            try:
                temporary = _temporary_beside(path)
                temporaries[path] = temporary
                with open(temporary, "wb") as stream:
                    stream.write(data)
                    stream.flush()
                    os.fsync(stream.fileno())
                os.chmod(temporary, 0o644)
            except OSError as error:
                unchanged = "the previous files are unchanged" if len(files) > 1 else "the previous file is unchanged"
                raise OSError(error.errno, f"{error.strerror or error}; {unchanged}", display(path)) from None
        with _stop_signals_deferred():
            for path, temporary in temporaries.items():
                os.replace(temporary, path)
    finally:
        for temporary in temporaries.values():
            temporary.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically (see `atomic_write_files`)."""
    path = Path(path)
    atomic_write_files({path: data})
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside `path` to write to bit by bit (a long vocoded wav); renamed into place when the
    block succeeds, removed when it fails or is interrupted."""
    target = Path(path)
    temporary = _temporary_beside(target)
    try:
        yield temporary
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        with _stop_signals_deferred():
            os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
