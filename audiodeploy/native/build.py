"""Build the C++ runner (``runner/``) with cmake against an executorch wheel, cached per target, executorch
version and source hash.

A cache entry is a folder that runs as it is, found by ``$ORIGIN``:

- ``host``, ``linux-aarch64``: ``audiodeploy-runner`` and the wheel libraries it links (runtime, thread pool,
  optimized kernels, XNNPACK); the aarch64 folder is what an arm64 Linux board (glibc) needs.
- ``android-arm64``: the same aarch64 folder plus glibc's arm64 loader and the C/C++ runtime libraries from the
  cross toolchain, and ``run.sh``, which starts the runner through that loader. A phone offers no glibc, so the
  bundle brings its own; no NDK is involved.

Builds happen in a temporary folder beside the entry and are renamed into place, so a failed or interrupted build
leaves no entry behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from audiodeploy._cache import CACHE_DIR_VARIABLE, cache_dir, unwritable_cache_message
from audiodeploy.native import tools, wheel
from audiodeploy.native.errors import NativeError

Target = Literal["host", "linux-aarch64", "android-arm64"]
TARGETS: tuple[Target, ...] = get_args(Target)
RUNNER_NAME = "audiodeploy-runner"
BUNDLE_SCRIPT = "run.sh"
# Bump when the layout of a cache entry changes, so old entries are not reused.
_ENTRY_FORMAT = "1"
_COMPLETE_MARKER = ".complete"

Log = Callable[[str], None]

_RUN_SCRIPT = """\
#!/bin/sh
# Runs the arm64 runner through the glibc loader shipped beside it, so nothing is taken from the device
# (Android has no glibc). Usage: ./run.sh --model m.pte --fill seeded ...
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/ld-linux-aarch64.so.1" --library-path "$here" "$here/audiodeploy-runner" "$@"
"""


@dataclass(frozen=True)
class BuiltRunner:
    target: Target
    directory: Path
    """The cache entry: the runner, its libraries and, for a bundle, the loader and run.sh."""
    executorch_version: str

    @property
    def executable(self) -> Path:
        return self.directory / RUNNER_NAME


def runner_source_dir() -> Path:
    """The runner's C++ sources: ``runner/`` of a source checkout, or the copy installed as package data."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "runner", here.parents[1] / "runner"):
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    raise NativeError(f"the runner's sources (runner/CMakeLists.txt) are missing from {here}; reinstall audiodeploy")


def default_cache_dir() -> Path:
    directory = cache_dir()
    if directory is None:
        raise NativeError(f"there is no home directory to cache the runner in: set {CACHE_DIR_VARIABLE} to a directory")
    return directory


def source_hash(source_dir: Path) -> str:
    """A hash of every file under the runner's source folder (names and bytes), so an edit forces a rebuild."""
    digest = hashlib.sha256(_ENTRY_FORMAT.encode())
    for path in sorted(p for p in source_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(source_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(_RUN_SCRIPT.encode())
    return digest.hexdigest()[:16]


def build_runner(
    target: Target = "host",
    *,
    cache_dir: Path | None = None,
    force: bool = False,
    log: Log | None = None,
) -> BuiltRunner:
    """The runner for `target`, built now unless the cache has it for this executorch version and these sources."""
    if target not in TARGETS:
        raise NativeError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    say = log or (lambda message: None)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    version = wheel.installed_version()
    source_dir = runner_source_dir()
    entry = cache_dir / "runner" / version / f"{target}-{source_hash(source_dir)}"
    if (entry / _COMPLETE_MARKER).is_file() and not force:
        return BuiltRunner(target, entry, version)

    if target == "android-arm64":
        # The bundle is the linux-aarch64 build plus the loader and libraries: built once, shared.
        system_libraries = tools.require_aarch64_system_libraries()
        arm64 = build_runner("linux-aarch64", cache_dir=cache_dir, force=force, log=log)
        with _staging(entry) as staged:
            shutil.copytree(arm64.directory, staged, ignore=shutil.ignore_patterns(_COMPLETE_MARKER))
            _add_bundle_files(staged, system_libraries)
            _publish_entry(staged, entry, target, version, force)
        say(f"assembled the android-arm64 bundle: {entry}")
        return BuiltRunner(target, entry, version)

    cmake = tools.require(tools.CMAKE)
    tools.require(tools.HOST_CXX if target == "host" else tools.AARCH64_CXX)
    package_root = (
        wheel.host_package_root() if target == "host" else wheel.aarch64_package_root(cache_dir, version, say)
    )
    start = time.monotonic()
    with _staging(entry) as staged:
        _cmake_build(cmake, source_dir, staged.parent / "build", staged, package_root, target)
        _publish_entry(staged, entry, target, version, force)
    say(f"built the {target} runner in {time.monotonic() - start:.1f} s: {entry}")
    return BuiltRunner(target, entry, version)


@contextlib.contextmanager
def _staging(entry: Path) -> Iterator[Path]:
    """A folder beside `entry` to build into; removed on the way out whatever happens (failure, Ctrl-C)."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        cache = next((p for p in entry.parents if p.name == "runner"), entry.parent).parent
        raise NativeError(unwritable_cache_message(cache, error)) from None
    with tempfile.TemporaryDirectory(dir=entry.parent, prefix=f".{entry.name}-") as scratch:
        yield Path(scratch) / "out"


def _add_bundle_files(staged: Path, system_libraries: list[Path]) -> None:
    for library in system_libraries:
        shutil.copy2(library, staged / library.name)
    (staged / "ld-linux-aarch64.so.1").chmod(0o755)
    script = staged / BUNDLE_SCRIPT
    script.write_text(_RUN_SCRIPT)
    script.chmod(0o755)


def _publish_entry(staged: Path, entry: Path, target: Target, version: str, force: bool) -> None:
    (staged / _COMPLETE_MARKER).write_text(f"{target} executorch {version}\n")
    _replace_entry(staged, entry, force)
    _remove_stale_entries(entry)


def _cmake_build(
    cmake: str, source_dir: Path, build_dir: Path, staged: Path, package_root: Path, target: Target
) -> None:
    configure = [
        cmake, "-S", str(source_dir), "-B", str(build_dir),
        f"-DCMAKE_PREFIX_PATH={package_root}", "-DCMAKE_BUILD_TYPE=Release",
    ]  # fmt: skip
    if target != "host":
        configure.append(f"-DCMAKE_TOOLCHAIN_FILE={source_dir / 'cmake' / 'aarch64-linux-gnu.toolchain.cmake'}")
    jobs = str(max(1, min(os.cpu_count() or 1, 4)))
    steps = [
        ("configuring", configure),
        ("compiling", [cmake, "--build", str(build_dir), "--parallel", jobs]),
        ("installing", [cmake, "--install", str(build_dir), "--prefix", str(staged)]),
    ]
    for step, command in steps:
        done = _run_tool(command)
        if done.returncode != 0:
            raise NativeError(f"{step} the {target} runner failed: {_first_error_line(done.stdout + done.stderr)}")


def _run_tool(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a build tool in its own process group, so an interruption stops the compilers it started too
    (killing cmake alone would leave make and cc1plus writing into a removed folder)."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _first_error_line(output: str) -> str:
    """The line of cmake or compiler output that says what went wrong (the whole log would not be one line)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for marker in ("error:", "Error", "CMake Error", "undefined reference"):
        for index, line in enumerate(lines):
            if marker in line:
                # CMake puts the reason on the line after "CMake Error at ...:".
                if line.startswith("CMake Error") and index + 1 < len(lines):
                    return f"{line} {lines[index + 1]}"
                return line
    return lines[-1] if lines else "no output"


def _replace_entry(staged: Path, entry: Path, force: bool) -> None:
    if force and entry.exists():
        # Rename the old entry aside first, so the cache never holds a half-deleted folder.
        aside = entry.with_name(f".{entry.name}-old-{os.getpid()}")
        os.rename(entry, aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(staged, entry)
    except OSError:
        # Another process finished the same build first: its entry is as good as ours.
        if not (entry / _COMPLETE_MARKER).is_file():
            raise


def _remove_stale_entries(entry: Path) -> None:
    """Entries of the same target built from other sources are never used again."""
    target = entry.name.rsplit("-", 1)[0]
    for sibling in entry.parent.iterdir():
        if sibling != entry and sibling.name.rsplit("-", 1)[0] == target:
            shutil.rmtree(sibling, ignore_errors=True)


def copy_runner(built: BuiltRunner, destination: Path) -> Path:
    """Copy a built runner (or bundle) folder to `destination`, which must not exist yet or be an empty folder."""
    destination = Path(destination)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise NativeError(f"{destination} already exists and is not an empty folder; give -o a new folder")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}-"))
    try:
        shutil.copytree(
            built.directory, staging / "copy", symlinks=False, ignore=shutil.ignore_patterns(_COMPLETE_MARKER)
        )
        if destination.exists():
            destination.rmdir()
        os.rename(staging / "copy", destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination
