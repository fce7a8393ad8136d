"""The JSON sidecar written beside every exported .pte: what the model is and what it expects."""

from __future__ import annotations

import datetime
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from audiodeploy._files import atomic_write_text

SCHEMA = "audiodeploy.sidecar/1"


class SidecarError(ValueError):
    """A missing or unreadable sidecar; the message says what to do."""


def sidecar_path(pte: str | os.PathLike[str]) -> Path:
    """``model.pte`` -> ``model.json``."""
    return Path(pte).with_suffix(".json")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in ("audiodeploy", "torch", "executorch", "torchaudio", "transformers", "numpy", "soundfile"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_sidecar(pte: str | os.PathLike[str], model: dict[str, Any], lowering: dict[str, Any]) -> Path:
    content = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "program": Path(pte).name,
        "model": model,
        "lowering": lowering,
        "versions": package_versions(),
    }
    return atomic_write_text(sidecar_path(pte), json.dumps(content, indent=2) + "\n")


def read_sidecar(pte: str | os.PathLike[str]) -> dict[str, Any]:
    path = sidecar_path(pte)
    if not path.is_file():
        raise SidecarError(
            f"{path}: no sidecar beside {Path(pte).name}; it says what the model expects: "
            "export the model with `audiodeploy export`, which writes both"
        )
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SidecarError(f"{path}: not a valid sidecar ({error}); export the model again") from None
    if not isinstance(content, dict) or content.get("schema") != SCHEMA:
        raise SidecarError(f"{path}: not an audiodeploy sidecar; export the model again with `audiodeploy export`")
    return content
