"""Programs exported once per test session through the command line, shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import audiodeploy


@pytest.fixture(scope="session")
def asr_model(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("asr")
    result = audiodeploy("export", "wav2vec2", "--variant", "tiny", "--min-seconds", "0.5", "--max-seconds", "2", "-o", str(directory / "w.pte"))
    assert result.returncode == 0, result.stderr
    assert "folded 1 computed weight(s)" in result.stdout
    return directory / "w.pte"


@pytest.fixture(scope="session")
def vocoder_model(tmp_path_factory) -> Path:
    # tiny-v3: HiFi-GAN's type-2 residual blocks, 23 convolutions, lower in a third of tiny's (78) time.
    directory = tmp_path_factory.mktemp("vocoder")
    result = audiodeploy("export", "hifigan", "--variant", "tiny-v3", "--min-seconds", "0.1", "--max-seconds", "1", "-o", str(directory / "v.pte"))
    assert result.returncode == 0, result.stderr
    return directory / "v.pte"
