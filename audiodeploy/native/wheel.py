"""The executorch C++ package a runner is built against: the installed wheel, or the aarch64 wheel of the same
version, downloaded with pip and unpacked once into the cache."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from audiodeploy.native.errors import NativeError

AARCH64_PLATFORM = "manylinux_2_28_aarch64"
# What CMake needs from a wheel: the libraries, the headers and the package config (share/cmake marks the root).
_CMAKE_PACKAGE_PARTS = ("executorch/lib/", "executorch/include/", "executorch/share/")


def installed_version() -> str:
    """The installed executorch version without a local label (1.5.1+cpu -> 1.5.1): what PyPI publishes."""
    try:
        return importlib.metadata.version("executorch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        raise NativeError("executorch is not installed: pip install executorch") from None


def host_package_root() -> Path:
    """The installed executorch package folder holding lib/, include/ and lib/cmake/executorch."""
    spec = importlib.util.find_spec("executorch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        root = Path(location)
        if (root / "lib" / "cmake" / "executorch" / "executorch-config.cmake").is_file():
            return root
    raise NativeError(
        "the installed executorch package has no C++ runtime (lib/cmake/executorch); install the executorch wheel "
        "from PyPI"
    )


def aarch64_package_root(cache_dir: Path, version: str, log: Callable[[str], None] = lambda message: None) -> Path:
    """The unpacked aarch64 wheel of `version` under `cache_dir`, downloading it with pip the first time."""
    root = cache_dir / "wheels" / f"executorch-{version}-{AARCH64_PLATFORM}"
    package = root / "executorch"
    if (package / "lib" / "cmake" / "executorch" / "executorch-config.cmake").is_file():
        return package
    root.parent.mkdir(parents=True, exist_ok=True)
    log(f"downloading the {AARCH64_PLATFORM} wheel of executorch {version} with pip")
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}-") as scratch:
        wheel = _download_aarch64_wheel(Path(scratch), version)
        unpacked = Path(scratch) / "unpacked"
        _unpack_cmake_package(wheel, unpacked)
        _publish(unpacked, root)
    return package


def _download_aarch64_wheel(into: Path, version: str) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--platform", AARCH64_PLATFORM, "--python-version", "3.11",
        f"executorch=={version}", "-d", str(into), "--quiet", "--disable-pip-version-check",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("executorch-*.whl"))
    if done.returncode != 0 or not wheels:
        last_line = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise NativeError(f"cannot download the {AARCH64_PLATFORM} wheel of executorch {version} with pip: {last_line}")
    return wheels[0]


def _unpack_cmake_package(wheel: Path, into: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist() if name.startswith(_CMAKE_PACKAGE_PARTS)]
            archive.extractall(into, members)
    except zipfile.BadZipFile:
        raise NativeError(f"{wheel.name} is not a valid wheel (a broken download?)") from None
    if not (into / "executorch" / "lib" / "libexecutorch.so").is_file():
        raise NativeError(f"{wheel.name} ships no C++ runtime (executorch/lib/libexecutorch.so)")
    # zipfile drops the executable bits; the linker does not care, but a copied bundle should look normal.
    for library in (into / "executorch" / "lib").glob("*.so"):
        library.chmod(0o755)


def _publish(unpacked: Path, root: Path) -> None:
    """Rename into place: a reader sees the whole package or none, and a concurrent download that won is kept."""
    try:
        os.rename(unpacked, root)
    except OSError:
        if not root.is_dir():
            raise
        shutil.rmtree(unpacked, ignore_errors=True)
