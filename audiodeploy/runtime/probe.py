"""Load untrusted program bytes in a child process first, so that a crash of the runtime kills a child, not the caller.

This is the caller's side: it starts the :mod:`~audiodeploy.runtime._probe` server (an interpreter that imports
only ExecuTorch's extension and forks a child per program), sends it programs, and turns a child killed by a
signal into a one-line :class:`~audiodeploy.runtime.pte_check.ProgramLoadError`.

Why a child process first (measured with ExecuTorch 1.5.1). Fuzzing a Conv1d+Linear program with one
XNNPACK delegate (``tests/runtime/test_program_fuzz.py``'s mutants, 4 seeds x 300: truncations and 1-4 byte
flips biased to the header, the flatbuffer, the delegate payload and the constants), each mutant loaded
in-process as :class:`~audiodeploy.runtime.program.Program` does, killed the interpreter 32 times out of 1,200.
The checks of :mod:`~audiodeploy.runtime.pte_check` catch 4 (a non-UTF-8 file identifier, which the runtime
quotes in a log line). The other 28 pass them, and ExecuTorch's verification, and still crash, for reasons no
check in Python can rule out short of re-implementing the runtime's readers:

- 24 ``SIGABRT``: a damaged name that the runtime quotes in a log line (22 inside the XNNPACK payload,
  ``[XNNCompiler.cpp:258]``, 2 in the program's flatbuffer). pybind11's redirection of the log to
  ``sys.stderr`` raises ``UnicodeDecodeError`` where nothing can catch it, and the process aborts, as it did
  on any ``.wav`` before the identifier check;
- 3 ``SIGSEGV`` inside XNNPACK, which reads its payload's flatbuffer without a verifier;
- 1 ``SIGABRT`` from an assertion: a table that the flatbuffer verifier accepts but the loader needs
  (``Missing outputs field``, then ``Result::get()`` on an error).

With the probe, no mutant kills the caller: those 28 are reported as "the ExecuTorch runtime crashed while
loading ...". Costs, on this machine (2 cores): the server starts in about 0.6 s, on a process's first probe.
Each probe after that is a fork and a load, about 15 ms for a small program; :mod:`~audiodeploy.runtime.verdicts`
caches what it finds, so a program is probed once per machine. Only loading is covered: a damaged program that
loads may still compute garbage or take long when run (in an exploration that also ran the mutants that loaded,
none crashed; one ran for 34 s instead of microseconds).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from audiodeploy.runtime import _probe
from audiodeploy.runtime.pte_check import ProgramLoadError
from audiodeploy.runtime.runtime_log import log_runtime_lines

__all__ = ["probe_program"]

logger = logging.getLogger("audiodeploy.runtime")

_STOP_SECONDS = 2
"""How long a server whose stdin was closed gets to exit before it is killed."""


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
        """A new server, ready for requests; None (with the reason in ``_unavailable``) when none starts."""
        # The server finds ExecuTorch where this process found it, whatever sys.path tweaks led there.
        spec = importlib.util.find_spec("executorch")
        roots = [os.path.dirname(location) for location in (spec.submodule_search_locations or [])] if spec else []
        try:
            process = subprocess.Popen(
                [sys.executable, os.path.abspath(_probe.__file__), *roots],
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
        """This process's running server, started if there is none (or it is gone); None if none can start."""
        if self._unavailable is not None or not sys.executable:
            return None
        process = self._process
        if process is None or self._pid != os.getpid() or process.poll() is not None:
            return self._start()
        return process

    def probe(self, buffer: bytes, data_path: str | None) -> dict[str, Any] | None:
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
                    process.stdin.write(_probe.REQUEST_HEADER.pack(len(buffer), len(path)) + path)
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
        """Close the server's stdin (it exits then) and wait for it; a server of another process is left alone."""
        process, self._process = self._process, None
        if process is None or self._pid != os.getpid():
            return
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_PROBE_SERVER = _ProbeServer()
atexit.register(_PROBE_SERVER.stop)


def probe_program(buffer: bytes, origin: str, data_path: str | None) -> bool | None:
    """Load ``buffer`` in a child process first: True if it loaded there, False if the runtime refused it (the
    caller then gets the refusal by loading it itself, safely), None if no child could tell. Raises
    :class:`ProgramLoadError` when the child was killed by a signal."""
    verdict = _PROBE_SERVER.probe(buffer, data_path)
    if verdict is None:
        return None
    log_runtime_lines(str(verdict.get("log", "")))
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
