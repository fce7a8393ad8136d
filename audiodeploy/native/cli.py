"""``audiodeploy runner ...``: build the native runner. Mounted by audiodeploy.cli as the ``runner`` sub-command.

Imports only typer and rich up front (the build itself needs neither torch nor executorch's Python side).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

runner_app = typer.Typer(
    name="runner",
    help="Build the native C++ runner against the executorch wheel: this machine, arm64 Linux, or an Android bundle.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_out = Console(soft_wrap=True, highlight=False)
_err = Console(stderr=True, soft_wrap=True, highlight=False)


@runner_app.callback()
def _runner() -> None:
    """Build the native C++ runner (one sub-command today; a callback keeps `runner build` a group either way)."""


_TARGET_HELP = (
    "host: this machine. linux-aarch64: arm64 Linux boards (glibc), cross-compiled with g++-aarch64-linux-gnu "
    "against the aarch64 executorch wheel (downloaded with pip). android-arm64: that build as a self-contained "
    "bundle with glibc's loader, for /data/local/tmp on a phone (no NDK); run it with ./run.sh."
)


@runner_app.command("build")
def build(
    target: Annotated[str, typer.Option("--target", "-t", help=_TARGET_HELP)] = "host",
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Also copy the built runner folder (or bundle) to this new folder."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the cache has this runner.")] = False,
) -> None:
    """Build (or take from the cache) the runner for a target and print the folder that holds it."""
    from audiodeploy.native.build import TARGETS, build_runner, copy_runner
    from audiodeploy.native.errors import NativeError

    if target not in TARGETS:
        raise NativeError(f"unknown --target {target!r}; choose one of {', '.join(TARGETS)}")
    start = time.monotonic()
    with _err.status(f"building the {target} runner..."):
        built = build_runner(target, force=force, log=lambda message: _err.print(message, markup=False))
    _err.print(
        f"{target} runner ready in {time.monotonic() - start:.1f} s (executorch {built.executorch_version})",
        markup=False,
    )
    folder = copy_runner(built, output) if output is not None else built.directory
    _out.print(str(folder), markup=False)
