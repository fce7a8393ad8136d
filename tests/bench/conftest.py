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
from tests.native.conftest import (  # noqa: F401  (fixtures)
    android_bundle,
    arm64_runner,
    host_runner,
    runner_cache,
    tiny_program,
)

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def linear_pte(tmp_path_factory) -> Path:
    """A one-GEMM program (1, 8) -> (1, 4), no sidecar: it runs at its (static) shape."""
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 4).eval()
    path = tmp_path_factory.mktemp("pte") / "linear.pte"
    audiodeploy.lower(module, (torch.randn(1, 8),)).save(path)
    return path


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
