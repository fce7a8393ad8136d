"""The host tools a build or a run needs, each with the Debian package that provides it."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from audiodeploy.native.errors import NativeError

AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")


@dataclass(frozen=True)
class Tool:
    command: str
    debian_package: str
    purpose: str


CMAKE = Tool("cmake", "cmake", "to build the runner")
HOST_CXX = Tool("g++", "g++", "to build the host runner")
AARCH64_CXX = Tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu", "to cross-compile the runner for arm64")
QEMU_AARCH64 = Tool("qemu-aarch64", "qemu-user", "to run the arm64 runner on this machine")

# The glibc and GCC runtime a bundle carries, so it needs nothing from the device (a phone has no glibc).
BUNDLE_SYSTEM_LIBRARIES = (
    "ld-linux-aarch64.so.1",
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "libstdc++.so.6",
    "libgcc_s.so.1",
)


def require(tool: Tool) -> str:
    """The tool's full path, or a one-line NativeError naming the package to install."""
    found = shutil.which(tool.command)
    if found is None:
        raise NativeError(
            f"{tool.command} is not installed; it is needed {tool.purpose}: apt-get install -y {tool.debian_package}"
        )
    return found


def require_aarch64_system_libraries() -> list[Path]:
    """The arm64 loader and libraries from the cross toolchain's sysroot (package libc6-arm64-cross and friends)."""
    paths = [AARCH64_SYSROOT / "lib" / name for name in BUNDLE_SYSTEM_LIBRARIES]
    missing = [path.name for path in paths if not path.is_file()]
    if missing:
        raise NativeError(
            f"{', '.join(missing)} not found under {AARCH64_SYSROOT / 'lib'}; they come with the arm64 cross "
            f"toolchain: apt-get install -y {AARCH64_CXX.debian_package}"
        )
    return paths


QEMU_SME_FIXED_MAJOR = 10
"""The first qemu-user major version seen to emulate SME right (10.0.2, Debian bookworm-backports)."""


@functools.cache
def _qemu_major(qemu: str) -> int | None:
    try:
        done = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"version (\d+)\.", done.stdout)
    return int(found.group(1)) if found else None


def emulated_cpu(qemu: str) -> str:
    """The CPU model qemu-aarch64 emulates for the runner: ``$QEMU_CPU`` if set, else every feature qemu has,
    without SME on a qemu older than :data:`QEMU_SME_FIXED_MAJOR`.

    Measured on 2026-12-01: a tiny wav2vec2 int8-dynamic program differed by 0.43 from the x86-64 run under
    Debian's qemu 7.2 with ``-cpu max``, whose SME is on (XNNPACK then picks its SME int8 GEMMs), and matched
    to 1.5e-7 with ``max,sme=off``, with cortex-a53/a72/a76, neoverse-n1, a64fx, and under qemu 10.0 with SME
    on at every vector length tried. fp32 programs were right either way. So qemu 7.2 mis-emulates SME, and the
    SME kernels are checked only with a newer qemu (or a device).
    """
    chosen = os.environ.get("QEMU_CPU")
    if chosen:
        return chosen
    major = _qemu_major(qemu)
    return "max" if major is not None and major >= QEMU_SME_FIXED_MAJOR else "max,sme=off"
