"""What ExecuTorch's runtime says: its log lines, captured and re-emitted at DEBUG, and its errors put on one line.

Loading and running are quiet: the runtime's log lines (the five ``[cpuinfo_utils.cpp:...]`` lines of the first
load among them) are logged at DEBUG on the ``audiodeploy.runtime`` logger instead of printed. Imports nothing
heavy: the bench wraps its own first use of the runtime's threadpool in :func:`runtime_log` too.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["describe_runtime_error", "log_runtime_lines", "native_runtime_log", "runtime_log"]

logger = logging.getLogger("audiodeploy.runtime")

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

_STARTUP_CHATTER = ("Reading file", "Failed to open midr", "CPU info")
"""The start of cpuinfo's start-up lines: they say nothing about why a program failed."""

_MAX_DETAIL_CHARS = 200


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
        log_runtime_lines(captured.getvalue())


@contextlib.contextmanager
def native_runtime_log() -> Iterator[None]:
    """Collect what the runtime writes to file descriptor 2 during the block, and log it as :func:`runtime_log` does.

    For what runs outside a binding's call (a method's destruction, when Python drops it): pybind11's redirect
    is not in place then, so ``std::cerr`` is the process's fd 2 itself.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile(mode="w+b") as collected:
            os.dup2(collected.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                collected.seek(0)
                log_runtime_lines(collected.read().decode("utf-8", "replace"))
    finally:
        os.close(saved)


def log_runtime_lines(text: str) -> None:
    """Log each non-blank line the runtime wrote at DEBUG on ``audiodeploy.runtime``."""
    for line in text.splitlines():
        if line.strip():
            logger.debug("executorch: %s", line)


def describe_runtime_error(error: BaseException, log: str) -> str:
    """What the runtime said, on one line: the error's name (from its code, else its message) and the last
    line it logged."""
    message = " ".join(str(error).split()) or type(error).__name__
    code = re.search(r"error:? 0x:?([0-9a-fA-F]+)", message)
    head = _ERROR_NAMES.get(int(code.group(1), 16), f"error 0x{code.group(1)}") if code else message
    lines = [re.sub(r"^\[[^\]]*\]\s*", "", line).strip() for line in log.splitlines()]
    lines = [line for line in lines if line and not line.startswith(_STARTUP_CHATTER)]
    said = lines[-1] if lines else ""
    text = f"{head}: {said}" if said and said not in head else head
    return text if len(text) <= _MAX_DETAIL_CHARS else text[: _MAX_DETAIL_CHARS - 3] + "..."
