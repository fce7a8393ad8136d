"""The verdict cache: programs known to load without crashing the runtime, so that they skip the probe.

A verdict is keyed by the SHA-256 of the program's bytes, of its .ptd data if it has one, and of the identity
of the runtime's extension file (a verdict holds for the runtime that gave it). It is kept in memory and on
disk, as an empty file ``verified-programs/<key>`` under :func:`~audiodeploy._cache.cache_dir`, so a program
is probed once per machine. A load with a cached verdict pays the hash, about 1 ms per MiB. An unwritable
cache only means no caching, with one warning when ``$AUDIODEPLOY_CACHE_DIR`` chose it.

Bytes an exporter produced and ran are recorded with :func:`mark_verified`, so that their later loads from
disk skip the probe too.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
from pathlib import Path

from audiodeploy._cache import CACHE_DIR_VARIABLE, cache_dir, unwritable_cache_message
from audiodeploy.program.description import program_digest

__all__ = ["known_to_load", "mark_verified", "remember_loaded", "verdict_key"]

logger = logging.getLogger("audiodeploy.runtime")

_EXTENSION = "executorch.extension.pybindings._C"
"""The runtime's extension module, whose file identifies the runtime that gave a verdict."""

_UNKNOWN_RUNTIME = b"unknown runtime"

_KNOWN_TO_LOAD: set[str] = set()
"""Keys of programs that loaded in this process or its cache: they need no probe."""

_warned_cache_dir = False


@functools.lru_cache(maxsize=1)
def _runtime_identity() -> bytes:
    """The extension file's path, size and time: a verdict holds for the runtime that gave it."""
    try:
        spec = importlib.util.find_spec(_EXTENSION)
        origin = spec.origin if spec is not None else None
        stat = os.stat(origin) if origin else None
    except (ImportError, OSError, ValueError):
        return _UNKNOWN_RUNTIME
    return f"{origin}:{stat.st_size}:{stat.st_mtime_ns}".encode() if stat else _UNKNOWN_RUNTIME


def verdict_key(program_sha256: str, data: bytes | None) -> str:
    """The verdict's key: the program's SHA-256 (the one its sidecar records), its data and the runtime."""
    digest = hashlib.sha256(_runtime_identity() + b"\0program\0" + program_sha256.encode())
    if data is not None:
        digest.update(b"\0data\0")
        digest.update(data)
    return digest.hexdigest()


def _marker(key: str) -> Path | None:
    """The file on disk that records the verdict, or None when there is no cache directory."""
    directory = cache_dir()
    return directory / "verified-programs" / key if directory is not None else None


def known_to_load(key: str) -> bool:
    """Whether the program with this key loaded before, in this process or (per the cache) on this machine."""
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


def remember_loaded(key: str) -> None:
    """Record that the program with this key loaded: in memory, and on disk when the cache can be written."""
    _KNOWN_TO_LOAD.add(key)
    marker = _marker(key)
    if marker is None:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError as error:
        _cache_unwritable(error)


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
    remember_loaded(verdict_key(program_digest(bytes(buffer)), None if data is None else bytes(data)))
