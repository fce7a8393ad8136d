"""The direction of flow (DESIGN.md), checked on the source: recipes -> lowering core -> program <- runtime, with
the bench and the command line on top.

An import contract in the manner of import-linter's "layers", read with `ast` from every module (imports inside
functions and under TYPE_CHECKING included): import-linter itself builds its graph from the `audiodeploy` folder
and cannot see `recipes/`, which setuptools maps to `audiodeploy.recipes`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"cli"}),
    frozenset({"bench"}),
    frozenset({"recipes"}),
    frozenset({"_api"}),  # audiodeploy.lower: the core, with the runtime running the programs it measures
    frozenset({"lowering", "runtime", "native"}),  # independent of each other
    frozenset({"program"}),
)
"""Highest first: a layer may import the layers below it, not those above it, nor its siblings."""


def _layer_of(module: str) -> str | None:
    """The layer a module ``audiodeploy.X...`` belongs to; None for the shared top-level modules (_files, errors)
    and the package itself, whose ``__getattr__`` imports the layers lazily, by name."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "audiodeploy":
        return None
    return parts[1] if any(parts[1] in layer for layer in LAYERS) else None


def _rank(layer: str) -> int:
    return next(rank for rank, members in enumerate(LAYERS) if layer in members)


def _sources() -> dict[str, Path]:
    """Every module of the package by its import name, recipes/ as ``audiodeploy.recipes``."""
    modules = {}
    for folder, package in ((ROOT / "audiodeploy", "audiodeploy"), (ROOT / "recipes", "audiodeploy.recipes")):
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(module: str, path: Path) -> set[str]:
    """The absolute names ``module`` imports (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_every_import_goes_down_the_layers():
    modules = _sources()
    assert "audiodeploy.recipes.registry" in modules and "audiodeploy.lowering.pipeline" in modules
    broken = []
    for module, path in sorted(modules.items()):
        layer = _layer_of(module)
        if layer is None:
            continue
        for imported in sorted(_imports(module, path)):
            other = _layer_of(imported)
            if other is None or other == layer:
                continue
            if _rank(other) <= _rank(layer):
                broken.append(f"{module} ({layer}) imports {imported} ({other})")
    assert not broken, "\n".join(broken)


def test_the_contract_sees_a_broken_import(tmp_path):
    """The check itself: an import upwards is found."""
    path = tmp_path / "offending.py"
    path.write_text("from audiodeploy.runtime.model import load\n")
    imported = _imports("audiodeploy.lowering.offending", path)
    assert "audiodeploy.runtime.model" in imported
    assert _rank(_layer_of("audiodeploy.runtime.model")) <= _rank(_layer_of("audiodeploy.lowering.offending"))


def test_the_public_lower_sits_above_the_core_and_the_runtime_it_joins():
    modules = _sources()
    assert "audiodeploy._api" in modules
    imported = {_layer_of(name) for name in _imports("audiodeploy._api", modules["audiodeploy._api"])}
    assert {"lowering", "runtime"} <= imported
    assert _rank("_api") < _rank("lowering") and _rank("_api") < _rank("runtime")
    assert _layer_of("audiodeploy._files") is None and _layer_of("audiodeploy") is None
