"""Fixtures of the bench tests: a small .pte, a fake ``adb`` on PATH, a stand-in ``adb`` that runs the pushed
bundle under qemu-aarch64, and the native runner fixtures of tests/native (the same session cache)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import torch

import audiodeploy
from tests.cli import OFFLINE
from tests.cli import audiodeploy as run_command
from tests.native.conftest import (  # noqa: F401  (fixtures)
    android_bundle,
    arm64_runner,
    host_runner,
    runner_cache,
    tiny_program,
)
from tests.shared import shared_directory

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def linear_pte(tmp_path_factory) -> Path:
    """A one-GEMM program (1, 8) -> (1, 4), no sidecar: it runs at its (static) shape."""
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 4).eval()
    path = tmp_path_factory.mktemp("pte") / "linear.pte"
    audiodeploy.lower(module, (torch.randn(1, 8),)).save(path)
    return path


@pytest.fixture(scope="session")
def tiny_wav2vec2_bench() -> tuple[str, Path]:
    """The issue's command on wav2vec2's tiny variant, every runtime compared in one interleaved run (fp32 and
    int8) and profiled, with its table (stdout), ``r.json`` and ``r.png``; run once per test run, read by test_cli_bench.py
    and test_int8.py. A run lowers the model three times (audiodeploy, stock, int8) and exports it to ONNX twice: at
    one fixed length (``--min-seconds 1 --max-seconds 1``), which lowers in about half a range's time."""

    def bench(folder: Path) -> None:
        compare = "stock,eager,onnxruntime,audiodeploy-int8,onnxruntime-int8"
        result = run_command(
            *("bench", "wav2vec2", "--variant", "tiny", "--compare", compare, "--json", "r.json", "--plot", "r.png"),
            *("--min-seconds", "1", "--max-seconds", "1"),
            *("--runs", "3", "--warmup", "1", "--stock-runs", "2", "--stock-warmup", "0", "--profile"),
            cwd=folder,
            env={key: value for key, value in OFFLINE.items() if key != "OMP_WAIT_POLICY"},
        )
        assert result.returncode == 0, result.stderr
        (folder / "stdout.txt").write_text(result.stdout)

    folder = shared_directory("bench-wav2vec2-tiny", bench)
    return (folder / "stdout.txt").read_text(), folder


class FakeAdb:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.device = root / "device"
        self.log = root / "adb-calls.jsonl"
        self.pushed = root / "pushed"
        self.runner = root / "executor_runner"
        self.bin.mkdir(parents=True)
        self.device.mkdir()
        self.log.touch()
        self.runner.write_bytes(b"\x7fELF fake arm64 executor_runner")
        script = self.bin / "adb"
        script.write_text(f"#!{sys.executable}\n" + (HERE / "fake_adb.py").read_text())
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def env(self, mode: str = "ok") -> dict[str, str]:
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "FAKE_ADB_LOG": str(self.log),
            "FAKE_ADB_DEVICE": str(self.device),
            "FAKE_ADB_HELPERS": str(HERE),
            "FAKE_ADB_MODE": mode,
        }

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_adb(tmp_path, monkeypatch) -> FakeAdb:
    fake = FakeAdb(tmp_path / "adb")
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    return fake


class QemuAdb:
    """The stand-in ``adb`` of tests/bench/qemu_adb.py on PATH, with a folder standing in for the phone."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.phone = root / "phone"
        self.log = root / "adb-calls.jsonl"
        self.bin.mkdir(parents=True)
        (self.phone / "data" / "local" / "tmp").mkdir(parents=True)
        self.log.touch()
        script = self.bin / "adb"
        script.write_text(f"#!{sys.executable}\n" + (HERE / "qemu_adb.py").read_text())
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    @property
    def bench_dir(self) -> Path:
        return self.phone / "data" / "local" / "tmp" / "audiodeploy-bench"

    def env(self, mode: str = "ok") -> dict[str, str]:
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "QEMU_ADB_LOG": str(self.log),
            "QEMU_ADB_PHONE": str(self.phone),
            "QEMU_ADB_MODE": mode,
        }

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def qemu_adb(tmp_path, monkeypatch, android_bundle, runner_cache) -> QemuAdb:
    """The stand-in adb on PATH, and the session's runner cache as the bench's (the bundle is built once)."""
    stand_in = QemuAdb(tmp_path / "adb")
    for key, value in stand_in.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(runner_cache))
    return stand_in
