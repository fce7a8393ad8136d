"""Building the runner: the cache (per target, version and sources), atomic entries, missing tools."""

from __future__ import annotations

import shutil
import time

import pytest

from audiodeploy.native import NativeError, build, build_runner, copy_runner, tools


def test_second_build_comes_from_the_cache(host_runner, runner_cache):
    start = time.monotonic()
    again = build_runner("host", cache_dir=runner_cache)
    assert time.monotonic() - start < 1.0
    assert again.directory == host_runner.directory
    assert host_runner.directory.parent.name == host_runner.executorch_version
    names = sorted(path.name for path in host_runner.directory.iterdir())
    assert names == sorted(
        [".complete", "audiodeploy-runner", "libexecutorch.so", "libexecutorch_backend_xnnpack.so",
         "libexecutorch_kernels_optimized.so", "libexecutorch_threadpool.so"]
    )  # fmt: skip


def test_an_edited_source_changes_the_cache_key(tmp_path):
    sources = shutil.copytree(build.runner_source_dir(), tmp_path / "runner")
    before = build.source_hash(sources)
    main = sources / "src" / "main.cpp"
    main.write_text(main.read_text() + "\n// edited\n")
    assert build.source_hash(sources) != before


def test_a_failed_build_leaves_no_cache_entry(tmp_path, monkeypatch):
    broken = shutil.copytree(build.runner_source_dir(), tmp_path / "runner")
    (broken / "src" / "main.cpp").write_text("this is not C++\n")
    monkeypatch.setattr(build, "runner_source_dir", lambda: broken)
    cache = tmp_path / "cache"
    with pytest.raises(NativeError, match="compiling the host runner failed: .*error"):
        build_runner("host", cache_dir=cache)
    versions = list((cache / "runner").iterdir())
    assert [list(version.iterdir()) for version in versions] == [[]]


@pytest.mark.parametrize(
    ("target", "missing", "package"),
    [
        ("host", "cmake", "cmake"),
        ("host", "g++", "g++"),
        ("linux-aarch64", "aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu"),
    ],
)
def test_a_missing_tool_is_one_line_naming_the_debian_package(tmp_path, monkeypatch, target, missing, package):
    real_which = shutil.which
    monkeypatch.setattr(tools.shutil, "which", lambda command: None if command == missing else real_which(command))
    with pytest.raises(NativeError) as raised:
        build_runner(target, cache_dir=tmp_path)
    message = str(raised.value)
    assert "\n" not in message and missing in message and f"apt-get install -y {package}" in message


def test_unknown_target_is_refused(tmp_path):
    with pytest.raises(NativeError, match="unknown target 'ios'"):
        build_runner("ios", cache_dir=tmp_path)  # type: ignore[arg-type]


def test_copy_refuses_a_folder_that_has_files(host_runner, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("mine")
    with pytest.raises(NativeError, match="not an empty folder"):
        copy_runner(host_runner, tmp_path / "taken")
    assert (tmp_path / "taken" / "file").read_text() == "mine"


def test_cli_build_copies_the_runner(host_runner, runner_cache, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from audiodeploy.native.cli import runner_app

    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(runner_cache))
    result = CliRunner().invoke(runner_app, ["build", "--target", "host", "-o", str(tmp_path / "copy")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "copy" / "audiodeploy-runner").is_file()
    assert not (tmp_path / "copy" / ".complete").exists()
    assert str(tmp_path / "copy") in result.output


def test_cli_rejects_an_unknown_target(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from audiodeploy.native.cli import runner_app

    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(runner_app, ["build", "--target", "ios"])
    assert result.exit_code != 0
    assert isinstance(result.exception, NativeError) and "unknown --target 'ios'" in str(result.exception)


def test_a_cache_directory_that_is_a_file_is_one_line_naming_the_variable(tmp_path):
    from tests.cli import OFFLINE, assert_clean_error, audiodeploy

    blocked = tmp_path / "not-a-directory"
    blocked.write_text("mine")
    result = audiodeploy("runner", "build", "--target", "host", env={**OFFLINE, "AUDIODEPLOY_CACHE_DIR": str(blocked)})
    assert_clean_error(result, f"AUDIODEPLOY_CACHE_DIR={blocked} cannot be written", "writable directory")
    assert blocked.read_text() == "mine"
