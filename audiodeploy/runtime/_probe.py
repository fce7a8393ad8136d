"""Load programs in child processes, so that a runtime crash on damaged bytes kills a child, not the caller.

:mod:`audiodeploy.runtime.probe` starts this file as a server, ``python .../_probe.py [ROOT...]`` (ROOT:
where the caller found ExecuTorch, searched last). It is run by path, not ``-m``, so that nothing of
audiodeploy, torch's Python package or ``executorch.exir`` is imported, only ExecuTorch's pybindings
extension (about 0.6 s here: it maps libtorch). The server stays single-threaded
and never loads a program itself: for each request it forks a child, which loads the program the way
:class:`~audiodeploy.runtime.program.Program` does (``InternalConsistency`` verification, every method
loaded, which initializes the XNNPACK delegates, then everything freed) and reports. A fork costs
milliseconds, so only the first probe of a process pays for the interpreter.

Protocol, on the server's stdin and stdout: the server first writes ``{"ready": true}`` (or ``false`` with
``"error"``) as a JSON line. A request is ``REQUEST_HEADER.pack(program_size, len(data_path))``, the data
path (UTF-8, empty for none), then the program's bytes; the reply is one JSON line:
``{"loaded": bool, "error": str, "log": str}`` when the child finished (a refusal is a verdict too: loading
did not crash), or ``{"signal": n, "log": str}`` when it was killed by signal ``n``. The server exits when
its stdin closes or after :data:`IDLE_SECONDS` without a request.
"""

from __future__ import annotations

import json
import os
import select
import struct
import sys
import tempfile
from typing import Any

IDLE_SECONDS = 120.0
REQUEST_HEADER = struct.Struct("<QI")
"""A request's start: the program's size and the data path's, little-endian."""


def _write_line(fd: int, message: dict[str, Any]) -> None:
    """Write ``message`` as one JSON line, whole."""
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes, or None if the stream ends first."""
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _load(extension: Any, buffer: bytes, data_path: str | None) -> dict[str, Any]:
    """Load as ``Program`` does (XNNPACK's weight cache on where it suits the program), in this (forked) process;
    the runtime's log lines go into the verdict."""
    import contextlib
    import io

    from audiodeploy.runtime.weight_cache import weight_cache_suits, xnnpack_weight_cache

    log = io.StringIO()
    verdict: dict[str, Any] = {"loaded": False, "error": ""}
    # The runtime's log reaches sys.stdout/sys.stderr (pybind11's stream redirection).
    cached = weight_cache_suits(buffer)
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), xnnpack_weight_cache(cached):
        try:
            program = extension._load_program_from_buffer(
                buffer, program_verification=extension.Verification.InternalConsistency, data_path=data_path
            )
            methods = [program.load_method(program.get_method_name(i)) for i in range(program.num_methods())]
            del methods, program  # freeing is part of loading: the methods, the program, the bytes last
            verdict["loaded"] = True
        except Exception as error:
            verdict["error"] = f"{type(error).__name__}: {error}"
    verdict["log"] = log.getvalue()[-4000:]
    return verdict


def _probe_in_child(extension: Any, buffer: bytes, data_path: str | None) -> dict[str, Any]:
    """Fork a child that loads ``buffer`` and reports; the verdict, or the signal that killed the child."""
    verdict_read, verdict_write = os.pipe()
    with tempfile.TemporaryFile() as native_stderr:
        pid = os.fork()
        if pid == 0:  # the child: load, report, leave without running any Python clean-up
            try:
                os.close(verdict_read)
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                os.dup2(native_stderr.fileno(), 2)  # what native code writes itself (libstdc++'s last words)
                _write_line(verdict_write, _load(extension, buffer, data_path))
            finally:
                os._exit(0)
        os.close(verdict_write)
        chunks = []
        while True:
            chunk = os.read(verdict_read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(verdict_read)
        _, status = os.waitpid(pid, 0)
        native_stderr.seek(0)
        native = native_stderr.read()[-4000:].decode("utf-8", "replace")
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status), "log": native}
    try:
        verdict = json.loads(b"".join(chunks))
    except ValueError:
        return {"loaded": False, "error": f"the child exited with status {os.WEXITSTATUS(status)}", "log": native}
    if native:
        verdict["log"] = verdict.get("log", "") + native
    return verdict


def serve() -> int:
    """Answer requests on stdin until it closes or stays idle; the exit status (1 when ExecuTorch is missing)."""
    requests, replies = 0, 1
    try:
        from executorch.extension.pybindings import _C as extension
    except Exception as error:  # no ExecuTorch in this interpreter: the caller loads unprobed
        _write_line(replies, {"ready": False, "error": f"{type(error).__name__}: {error}"})
        return 1
    _write_line(replies, {"ready": True})
    while True:
        readable, _, _ = select.select([requests], [], [], IDLE_SECONDS)
        if not readable:
            return 0  # idle: the caller starts another server when it needs one
        header = _read_exactly(requests, REQUEST_HEADER.size)
        if header is None:
            return 0
        size, path_size = REQUEST_HEADER.unpack(header)
        path = _read_exactly(requests, path_size) if path_size else b""
        buffer = _read_exactly(requests, size) if size else b""
        if path is None or buffer is None:
            return 0
        _write_line(replies, _probe_in_child(extension, buffer, path.decode() or None))


if __name__ == "__main__":
    # Run by path, the script's own directory comes first on sys.path; its modules are no business of the probe.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    # Where the caller found ExecuTorch, after this interpreter's own places.
    sys.path.extend(root for root in sys.argv[1:] if root not in sys.path)
    sys.exit(serve())
