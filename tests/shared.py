"""Work done once per test run, whichever pytest-xdist worker asks for it first.

The suite runs on every core (``pytest -n auto``), and each worker is a process with its own session fixtures.
A tiny lowering takes 10-60 s here, so the programs several test files share are made by the first worker that
needs them, under a file lock, in a folder every worker of the run sees; the others wait for it and read it.

    directory = shared_directory("asr-program", lambda folder: export_into(folder))
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

_root: Path | None = None
T = TypeVar("T")


def set_run_root(session_base: Path) -> None:
    """Called once per worker (tests/conftest.py) with pytest's base temporary directory of the session."""
    global _root
    # Under xdist every worker's base directory is a child of the run's (`.../pytest-N/popen-gw0`).
    _root = (session_base.parent if os.environ.get("PYTEST_XDIST_WORKER") else session_base) / "shared"
    _root.mkdir(parents=True, exist_ok=True)


def shared_directory(key: str, make: Callable[[Path], None]) -> Path:
    """A folder filled by `make(folder)` once in this test run; a failed `make` is retried by the next caller."""
    if _root is None:
        raise RuntimeError("tests.shared is used before the session started (tests/conftest.py sets its root)")
    directory = _root / key
    done = directory / ".complete"
    with FileLock(f"{directory}.lock"):
        if not done.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            make(directory)
            done.touch()
    return directory


def shared_value(key: str, make: Callable[[], T]) -> T:
    """`make()`'s result, computed once in this test run and pickled for the other workers (our own files only)."""

    def write(folder: Path) -> None:
        (folder / "value.pickle").write_bytes(pickle.dumps(make()))

    return pickle.loads((shared_directory(key, write) / "value.pickle").read_bytes())
