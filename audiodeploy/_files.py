"""Writing the user's files safely: a reader never sees a partial file, a failure or a signal leaves the previous
files as they were and no temporary file behind, and a target that cannot be written is found before the work.

What a target is decides how it is written:

- a regular file, or no file yet: written to a temporary beside it and renamed over it (atomic);
- a symlink: followed, and the file it points to is replaced atomically; the link stays a link;
- a character device (a terminal, /dev/null) or a FIFO (a named pipe, /dev/stdout in a pipeline): written through,
  in order, never replaced, since renaming a file over it would destroy the device node or the pipe;
- anything else (a directory, a block device, a socket): refused.

Temporaries are named ``.{target}.{pid}.{random}.tmp``, so a temporary that a killed process (SIGKILL) left behind
is known by its dead pid and removed the next time a temporary is made for the same target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal

from audiodeploy.errors import AudiodeployError


class OutputPathError(AudiodeployError, ValueError):
    """A target that cannot or must not be written; the message names it and what to do."""


# The signals a user (Ctrl-C, `kill`, a closed terminal) sends to stop a command; while a group of files is
# renamed into place they wait, so the group is replaced whole or not at all.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}

_REFUSED_KINDS = {stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}

# Write ends of the FIFOs that `check_writable` opened. They stay open until the process ends: closing the only
# writer would end the reader's stream (EOF) before the real write. Inheritable, so that a command that
# re-executes itself (bench) keeps the reader connected across the exec.
_held_streams: list[BinaryIO] = []

Kind = Literal["file", "stream"]


def display(path: str | os.PathLike[str]) -> str:
    """A path as it can be printed, whatever bytes its name holds."""
    return os.fsdecode(path).encode("utf-8", "backslashreplace").decode("utf-8")


def output_kind(path: str | os.PathLike[str], option: str | None = None) -> Kind:
    """How `path` is written: "file" (a regular file, a new one, or a symlink to either) or "stream" (a character
    device or a FIFO, written through). Raise `OutputPathError` for a target no file may replace."""
    shown = display(path)
    remedy = f"give {option} a file name" if option else "write to a file instead"
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "file"  # a new file (or a dangling link's target): whether it can be created is checked elsewhere
    except OSError as error:  # a symlink loop, a directory that cannot be searched
        raise OutputPathError(f"cannot write {shown}: {error.strerror or error}; {remedy}") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream"
    if stat.S_ISDIR(mode):
        # An OSError, as the rename over it would have raised: `LoweredProgram.save(directory)` callers catch that.
        raise IsADirectoryError(errno.EISDIR, f"it is a directory, not a file; {remedy}", shown)
    kind = _REFUSED_KINDS.get(stat.S_IFMT(mode), "a special file")
    raise OutputPathError(f"cannot write {shown}: it is {kind}, not a file; {remedy}")


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a character device or a FIFO (written through, with no file name extension to honour)."""
    try:
        return output_kind(path) == "stream"
    except OutputPathError:
        return False


def check_writable(path: str | os.PathLike[str], option: str = "-o", streams: bool = True) -> Path:
    """Raise `OutputPathError` unless `path` can be written now: a file by creating and removing one beside it
    (beside a symlink's target), a character device or FIFO by opening it (a FIFO must have a reader).

    Catches a missing or read-only directory, a directory or another non-file in the way, a file system that takes
    no new files (/proc), a FIFO nobody reads, and a name that is not text, before any slow work starts. With
    `streams` false a character device or FIFO is refused too (files that must be written as files, side by side).
    """
    path = Path(path)
    shown = display(path)
    try:
        os.fsdecode(path).encode("utf-8")
    except UnicodeEncodeError:
        raise OutputPathError(
            f"cannot write {shown}: its name is not valid UTF-8 text; give {option} another name"
        ) from None
    if path.is_dir():
        raise OutputPathError(f"{shown} is a directory; give {option} a file name, e.g. {display(path / 'out')}")
    if output_kind(path, option) == "stream":
        if not streams:
            raise OutputPathError(
                f"cannot write {shown}: it is a device or a pipe, not a file; give {option} a file name"
            )
        _hold_stream(path, option)
        return path
    parent = _real_file(path).parent
    if not parent.is_dir():
        raise OutputPathError(
            f"cannot write {shown}: directory {display(parent)} does not exist; create it or change {option}"
        )
    try:
        probe = _temporary_beside(_real_file(path), suffix=".probe")
    except OSError as error:
        raise OutputPathError(f"cannot write {shown}: {error.strerror or error}; change {option}") from None
    probe.unlink()
    return path


def _hold_stream(path: Path, option: str) -> None:
    """Open `path` (a character device or FIFO) as the write will; a FIFO's write end is kept open."""
    try:
        stream = _open_stream(path, option)
    except OutputPathError:
        raise
    except OSError as error:
        raise OutputPathError(f"cannot write {display(path)}: {error.strerror or error}; change {option}") from None
    if not stat.S_ISFIFO(os.fstat(stream.fileno()).st_mode):
        stream.close()
        return
    os.set_inheritable(stream.fileno(), True)
    _held_streams.append(stream)


def _open_stream(path: Path, option: str | None = None) -> BinaryIO:
    """`path`, a character device or FIFO, opened for writing. A FIFO without a reader is refused at once: a
    blocking open would wait for one forever."""
    shown = display(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ENXIO and stat.S_ISFIFO(os.stat(path).st_mode):
            where = f" or change {option}" if option else ""
            raise OutputPathError(
                f"cannot write {shown}: the pipe has no reader; start its reader first (e.g. `cat {shown} > copy &`){where}"
            ) from None
        raise OSError(error.errno, error.strerror, shown) from None
    # The reader is there: from now on a full pipe waits for it rather than failing the write.
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb")


def _write_through(path: Path, data: bytes) -> None:
    stream = _open_stream(path)
    try:
        with stream:
            stream.write(data)
    except OSError as error:
        raise _naming(error, path) from None


def _naming(error: OSError, path: Path) -> OSError:
    """`error` (a failed write to a device, as to /dev/full) with the path it was written to."""
    return OSError(error.errno, error.strerror or str(error), display(path))


def refuse_overwrite(output: Path, protected: Sequence[tuple[Path, str]], option: str = "-o") -> None:
    """Raise `OutputPathError` when `output` is one of the `protected` files (path, what it is)."""
    for path, what in protected:
        if _same_file(output, path):
            raise OutputPathError(f"{option} {display(output)} would overwrite {what}; give {option} another name")


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.abspath(a) == os.path.abspath(b)


def _real_file(path: Path) -> Path:
    """The file a write to `path` replaces: a symlink's final target, so that the link stays a link."""
    return Path(os.path.realpath(path))


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


def _temporary_beside(path: Path, suffix: str = ".tmp") -> Path:
    """A new empty file ``.{name}.{pid}.{random}{suffix}`` beside `path`, after removing the dead ones."""
    _remove_stale_temporaries(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=suffix)
    os.close(fd)
    return Path(name)


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporaries for `path` whose creator is dead (killed before it could clean up).

    Only names of our own pattern for this very target are touched, and only when their pid is gone. A pid reused
    since, or a process in another pid namespace, makes a temporary look alive: it is then left, never a live one
    removed.
    """
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.[a-z0-9_]+\.(?:tmp|probe)")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return  # creating the temporary will say what is wrong with the directory
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and entry.is_file(follow_symlinks=False) and not _process_alive(int(match[1])):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: alive, someone else's
        return True
    return True


def atomic_write_files(files: Mapping[Path, bytes]) -> None:
    """Write every ``path: bytes`` of `files` so that all of them change, or none.

    Each file is written to a temporary file beside its target (a symlink's target) and flushed to disk; only when
    all are written are they renamed into place, with the stop signals held, so an interruption or a failure while
    writing (a full disk) leaves the previous files untouched and no temporary file.

    A single file may go to a character device or FIFO: it is written through. Several files replaced together
    cannot: written through, they would not change together, so such a target is refused (`OutputPathError`).
    """
    kinds = {path: output_kind(path) for path in files}
    streams = [path for path, kind in kinds.items() if kind == "stream"]
    if streams and len(files) > 1:
        raise OutputPathError(
            f"cannot write {display(streams[0])}: it is a device or a pipe, and these files are written together as "
            "files; write them to a file name"
        )
    if streams:
        _write_through(streams[0], files[streams[0]])
        return
    temporaries: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            try:
                temporary = _temporary_beside(_real_file(path))
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
                os.replace(temporary, _real_file(path))
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
    """A temporary path to write to bit by bit (a long vocoded wav), which may be reopened and sought in (a wav
    header is written last). For a file it lies beside the target (a symlink's target) and is renamed into place
    when the block succeeds; for a character device or FIFO it lies in the system's temporary directory and its
    bytes are copied into the device when the block succeeds (disk, not memory, holds a long output). It is removed
    when the block fails or is interrupted."""
    target = Path(path)
    if output_kind(target) == "stream":
        with _written_through_at_the_end(target) as temporary:
            yield temporary
        return
    real = _real_file(target)
    temporary = _temporary_beside(real)
    try:
        yield temporary
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        with _stop_signals_deferred():
            os.replace(temporary, real)
    finally:
        temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def _written_through_at_the_end(target: Path) -> Iterator[Path]:
    stream = _open_stream(target)  # before the work, so that a FIFO without a reader is refused before it
    temporary: Path | None = None
    try:
        temporary = _temporary_beside(Path(tempfile.gettempdir()) / target.name)
        yield temporary
        try:
            with open(temporary, "rb") as written:
                shutil.copyfileobj(written, stream)
            stream.flush()
        except OSError as error:
            raise _naming(error, target) from None
    finally:
        with contextlib.suppress(OSError):  # after a failed write, closing fails the same way again
            stream.close()
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def read_user_file(
    path: str | bytes | os.PathLike[Any], shown: str, what: str, remedy: str, error: type[AudiodeployError]
) -> bytes:
    """The bytes of a file the user named (shown as `shown`): one that cannot be read raises `error` in one line,
    naming the file as `what` and the `remedy`."""
    try:
        return Path(os.fsdecode(path)).read_bytes()
    except FileNotFoundError:
        raise error(f"{shown}: no such file; {remedy}") from None
    except IsADirectoryError:
        raise error(f"{shown} is a directory, not a {what}; {remedy}") from None
    except PermissionError:
        raise error(f"{shown}: permission denied; make the {what} readable or copy it") from None
    except OSError as failure:
        reason = failure.strerror or type(failure).__name__
        raise error(f"{shown}: cannot read the {what} ({reason}); {remedy}") from None
    except (UnicodeError, ValueError) as failure:  # a name the file system cannot take (a NUL, a lone surrogate)
        raise error(f"{shown}: not a usable file name ({type(failure).__name__}); {remedy}") from None
