"""Running the `audiodeploy` command as a user does, in a subprocess, and what a clean failure looks like."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile

# No test reaches a network: a hub id resolves against a closed port on this machine.
OFFLINE = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"}


def audiodeploy(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "audiodeploy", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
        env=env or OFFLINE,
        **kwargs,
    )


def audiodeploy_importing(
    *args: str, modules: tuple[str, ...] = ("torch", "executorch", "transformers")
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``audiodeploy *args`` run in a fresh Python process, as :func:`audiodeploy` runs it, and which of ``modules``
    it had imported when it exited."""
    script = (
        "import runpy, sys\n"
        f"sys.argv = ['audiodeploy', *{list(args)!r}]\n"
        "status = 0\n"
        "try:\n"
        "    runpy.run_module('audiodeploy', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    status = exit.code or 0\n"
        f"print(repr((status, sorted(name for name in {modules!r} if name in sys.modules))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=OFFLINE, timeout=120)
    assert result.returncode == 0, result.stderr
    *output, last = result.stdout.splitlines(keepends=True)
    status, imported = ast.literal_eval(last)
    return subprocess.CompletedProcess(result.args, status, "".join(output), result.stderr), imported


def assert_clean_error(result: subprocess.CompletedProcess[str], *words: str, status: int = 2) -> str:
    """The given exit status, exactly one line on stderr naming the problem, no traceback; the line."""
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert all(line.startswith(("error:", "weights:", "note:")) or ": done in " in line for line in lines), (
        result.stderr
    )
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def write_tone(path: Path, seconds: float, sample_rate: int = 22050, channels: int = 2) -> Path:
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    tone = 0.3 * np.sin(2 * np.pi * 220 * t)
    soundfile.write(str(path), np.stack([tone] * channels, axis=1), sample_rate)
    return path


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in `directory` (hidden temporaries included) and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
