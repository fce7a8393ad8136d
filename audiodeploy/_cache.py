"""Where audiodeploy keeps what it can make again (load verdicts, built runners), and what to say when it cannot.

Imports nothing heavy: the runtime and the native runner's build both use it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_VARIABLE = "AUDIODEPLOY_CACHE_DIR"


def cache_dir() -> Path | None:
    """``$AUDIODEPLOY_CACHE_DIR``, else ``$XDG_CACHE_HOME/audiodeploy``, else ``~/.cache/audiodeploy``; None
    when there is no home directory to put it in."""
    explicit = os.environ.get(CACHE_DIR_VARIABLE)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "audiodeploy"
    try:
        return Path.home() / ".cache" / "audiodeploy"
    except (RuntimeError, KeyError):
        return None


def unwritable_cache_message(directory: Path, error: OSError) -> str:
    """One line: the cache directory cannot be written, why, and what to do (naming the variable that chose it)."""
    why = error.strerror or str(error)
    if os.environ.get(CACHE_DIR_VARIABLE):
        return (
            f"{CACHE_DIR_VARIABLE}={directory} cannot be written ({why}): point {CACHE_DIR_VARIABLE} at a writable "
            "directory, or unset it"
        )
    return (
        f"the cache directory {directory} cannot be written ({why}): set {CACHE_DIR_VARIABLE} to a writable directory"
    )
