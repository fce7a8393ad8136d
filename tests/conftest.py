"""Programs exported once per test run through the command line, shared by the CLI tests (and by every
pytest-xdist worker: see tests/shared.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import shared
from tests.cli import audiodeploy
from tests.vits_checkpoint import write_vits_checkpoint


@pytest.fixture(scope="session", autouse=True)
def _shared_root(tmp_path_factory) -> None:
    shared.set_run_root(tmp_path_factory.getbasetemp())


def _exported(key: str, *args: str) -> Path:
    """``audiodeploy export *args -o <shared folder>/<key>.pte``, once per test run; the program's path (what the
    command printed is beside it, in stdout.txt and stderr.txt)."""

    def export(folder: Path) -> None:
        result = audiodeploy("export", *args, "-o", str(folder / f"{key}.pte"))
        assert result.returncode == 0, result.stderr
        (folder / "stdout.txt").write_text(result.stdout)
        (folder / "stderr.txt").write_text(result.stderr)

    return shared.shared_directory(key, export) / f"{key}.pte"


@pytest.fixture(scope="session")
def asr_model() -> Path:
    program = _exported("w", "wav2vec2", "--variant", "tiny", "--min-seconds", "0.5", "--max-seconds", "2")
    assert "folded 1 computed weight(s)" in (program.parent / "stdout.txt").read_text()
    return program


@pytest.fixture(scope="session")
def vocoder_model() -> Path:
    # tiny-v3: HiFi-GAN's type-2 residual blocks, 17 convolutions, lower in a third of tiny's (54) time.
    return _exported("v", "hifigan", "--variant", "tiny-v3", "--min-seconds", "0.1", "--max-seconds", "1")


@pytest.fixture(scope="session")
def codec_model() -> Path:
    # DAC's tiny variant: one program with an encode and a decode method, over 0.5-2 s.
    return _exported("d", "dac", "--variant", "tiny", "--min-seconds", "0.5", "--max-seconds", "2")


@pytest.fixture(scope="session")
def chunked_codec_model() -> Path:
    # EnCodec at 48 kHz at test size: stereo, its own chunks of 0.1 s, each with its scale (40 s of CPU to lower).
    return _exported("e48", "encodec", "--variant", "tiny-48khz")


@pytest.fixture(scope="session")
def carried_codec_model() -> Path:
    # EnCodec at 24 kHz at test size, in windows of 0.25 s (19 frames): both methods carry the LSTM's state. The
    # LSTM is unrolled over the window, so the window's length sets the lowering time (30 s of CPU here).
    return _exported("e24", "encodec", "--variant", "tiny", "--seconds", "0.25")


@pytest.fixture(scope="session")
def tts_model() -> Path:
    """The vits recipe from a tiny voice of three speakers this run writes (`tests.vits_checkpoint`, in
    ``checkpoint/`` beside the program), exported as a user would: ``export vits --weights DIR``. Several speakers,
    so that both methods also take the speaker's index: one voice covers what a one-speaker voice lowers and the
    speaker's conditioning (a voice's lowering is 70 s of CPU here)."""

    def export(folder: Path) -> None:
        checkpoint = write_vits_checkpoint(folder / "checkpoint", speakers=3)
        result = audiodeploy("export", "vits", "--weights", str(checkpoint), "-o", str(folder / "t.pte"))
        assert result.returncode == 0, result.stderr
        (folder / "stdout.txt").write_text(result.stdout)

    return shared.shared_directory("t", export) / "t.pte"


# Tests that build or run the C++ runner (cmake, the arm64 cross-compiler, qemu): `pytest -m native` runs them
# alone, `pytest -m "not native"` everything else.
_NATIVE_FIXTURES = frozenset({"host_runner", "arm64_runner", "android_bundle", "runner_cache", "qemu_adb"})
# Tests that need a whole recipe lowered (its tiny configuration: 15-60 s of CPU each here), through the shared
# programs or the recipe matrix: `pytest -m "not slow and not native"` is the quick loop while editing.
_SLOW_FIXTURES = frozenset(
    {
        "asr_model",
        "vocoder_model",
        "codec_model",
        "carried_codec_model",
        "tts_model",
        "tiny_wav2vec2_bench",
        "quantized_encoder",
        "quantized_vocoder",
        "recipe_programs",
    }
)
_SLOW_MODULES = frozenset({"test_lowered.py", "test_cli_quantize_guards.py", "test_cli_checkpoints.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.path.parent.name == "native" or _NATIVE_FIXTURES & fixtures:
            item.add_marker(pytest.mark.native)
        if item.path.name in _SLOW_MODULES or _SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
