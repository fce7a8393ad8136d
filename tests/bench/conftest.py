"""Fixtures of the bench tests: a small .pte, and a fake ``adb`` on PATH."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import torch

import audiodeploy

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
