"""int8 exports that went wrong without a word (issue 20): each is now refused in one line, or written with a
warning that the sidecar keeps.

- calibration audio too short to calibrate on (one sample), or that is not a regular file (a pipe: reading it
  blocked forever): refused before anything is lowered, the pipe before the model is even built;
- a --keep-fp32 pattern that matches no GEMM (it replaced the defaults with nothing): refused, naming GEMMs;
- fidelity under the floor (15 dB output SNR): a `warning:` line and `warnings` in the sidecar, an error with
  --strict (nothing written);
- a vocoder calibrated on a file longer than the program's range (an internal error, a failed guard): cut into
  windows, each a length the program takes;
- --calibrate-limit and --sensitivity say what they do: a note for the files left out, a line per stage.

The degraded program is the tiny wav2vec2 calibrated on a second of silence, which its first group norm turns
into nothing to observe (simulated in PyTorch: -2.8 dB output SNR and no frame's argmax kept, what the one-sample
file gave; a 220 Hz tone: 8.6 dB; speech-like audio, even at a thousand times full scale: 23 dB).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess

import numpy as np
import pytest
import soundfile

from tests.cli import assert_clean_error, audiodeploy, snapshot

FLOOR_DB = 15.0
TINY_ENCODER = ("wav2vec2", "--variant", "tiny", "--seconds", "0.5", "--quantize", "int8-static")
# Progress lines a slow step may print (at most one every few seconds, so whether one shows depends on the machine).
PROGRESS = re.compile(r"^(reading calibration audio|calibrating activation ranges|measuring sensitivity): .* of \d+")


def without_progress(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """`result` with its progress lines taken out of stderr, for `assert_clean_error`."""
    stderr = "\n".join(line for line in result.stderr.splitlines() if not PROGRESS.match(line))
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout, stderr)


def speech_like(sample_rate: int, seconds: float, seed: int) -> np.ndarray:
    """A voiced, amplitude-modulated harmonic sweep over a little noise (as tests/recipes/test_quantized.py)."""
    generator = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 100.0 + 150.0 * generator.random()
    voiced = sum(0.3 / k * np.sin(2 * math.pi * k * f0 * t * (1 + 0.3 * t)) for k in range(1, 8))
    envelope = 0.5 * (1 + np.sin(2 * math.pi * 3 * t))
    return (voiced * envelope + 0.01 * generator.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def silent_dir(tmp_path_factory):
    """Three seconds of silence, one per file: long enough to calibrate on, and nothing in them."""
    directory = tmp_path_factory.mktemp("silent")
    for index in range(3):
        soundfile.write(directory / f"silence{index}.wav", np.zeros(16_000, dtype=np.float32), 16_000)
    return directory


# Refused before lowering: cheap.


def test_int8_calibration_on_a_one_sample_file_is_refused_naming_it(tmp_path):
    soundfile.write(tmp_path / "one-sample.wav", np.array([0.3], dtype=np.float32), 16_000)
    before = snapshot(tmp_path)
    result = audiodeploy("export", *TINY_ENCODER, "--calibrate", "one-sample.wav", cwd=tmp_path)
    assert_clean_error(result, "one-sample.wav", "1 sample", "shorter than the 0.05 s", "give recordings of at least")
    assert snapshot(tmp_path) == before


def test_int8_calibration_on_a_pipe_is_refused_before_the_model_is_built(tmp_path):
    os.mkfifo(tmp_path / "fifo.wav")  # nothing ever writes to it: reading it would block forever
    result = audiodeploy("export", *TINY_ENCODER, "--calibrate", "fifo.wav", cwd=tmp_path)
    assert_clean_error(result, "fifo.wav", "not a regular file")
    assert "building" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.wav"]


def test_int8_keep_fp32_pattern_that_matches_no_gemm_is_refused_naming_gemms(tmp_path):
    result = audiodeploy("export", "wav2vec2", "--variant", "tiny", "--seconds", "0.5", "--quantize", "int8-dynamic",
                         "--keep-fp32", "*.lm_head", "--keep-fp32", "[abc", cwd=tmp_path)  # fmt: skip
    line = assert_clean_error(result, "pattern '[abc' matches no GEMM", "model.wav2vec2.feature_extractor.conv_layers.0",
                              "more)")  # fmt: skip
    assert "*.lm_head" not in line  # the pattern that matches is not the one blamed
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "options, words",
    [
        (("--strict",), "apply to quantized exports"),
        (("--quantize", "int8-static", "--calibrate-limit", "3"), "add --calibrate"),
        (("--quantize", "int8-static", "--calibrate", "x.wav", "--calibrate-limit", "0"), "keeps no calibration input"),
    ],
)
def test_int8_guard_options_that_make_no_sense_are_refused_before_any_work(tmp_path, options, words):
    soundfile.write(tmp_path / "x.wav", speech_like(16_000, 0.5, 0), 16_000)
    result = audiodeploy("export", "wav2vec2", "--variant", "tiny", *options, cwd=tmp_path)
    assert_clean_error(result, words)
    assert "building" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.wav"]


# Lowered: one export each.


def test_int8_under_the_fidelity_floor_is_an_error_with_strict_and_nothing_is_written(tmp_path, silent_dir):
    before = snapshot(tmp_path)
    result = audiodeploy("export", *TINY_ENCODER, "--calibrate", str(silent_dir), "--calibrate-limit", "2", "--strict",
                         cwd=tmp_path)  # fmt: skip
    line = assert_clean_error(
        without_progress(result), "output SNR", f"below the {FLOOR_DB:g} dB floor", "--calibrate", "nothing was written"
    )
    snr = float(re.search(r"output SNR (-?[\d.]+) dB", line).group(1))
    assert snr < FLOOR_DB
    # The first file's two windows (1 s through a 0.5 s program) reached the limit; the note says so.
    assert (
        "note: calibrating on 2 inputs from 1 of the 3 calibration files (--calibrate-limit 2); the other 2 were"
        in (result.stderr)
    )
    assert snapshot(tmp_path) == before


def test_int8_under_the_fidelity_floor_warns_and_the_sidecar_keeps_it_and_sensitivity_shows_progress(
    tmp_path, silent_dir
):
    """Also what every int8 export records: its scheme, its one delegate, its fidelity (the only int8 export of a
    speech encoder through the command line; an int8 lowering is 30-40 s of CPU here)."""
    result = audiodeploy("export", *TINY_ENCODER, "--calibrate", str(silent_dir / "silence0.wav"), "--sensitivity", "-o",
                         "w.pte", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"below the {FLOOR_DB:g} dB floor" in warnings[0], result.stderr
    lowering = json.loads((tmp_path / "w.json").read_text())["lowering"]
    quantization = lowering["quantization"]
    assert quantization["scheme"] == "int8-static" and lowering["methods"]["forward"]["delegates"] == 1
    assert "int8" in result.stdout
    assert quantization["methods"]["forward"]["fidelity"]["snr_db"] < FLOOR_DB
    assert [f"warning: {w}" for w in quantization["warnings"]] == warnings
    # Each GEMM measured alone is announced as it starts: the first at once, then at most one every few seconds.
    progress = re.findall(r"^measuring sensitivity: GEMM (\d+) of (\d+) \(", result.stderr, re.MULTILINE)
    assert progress and progress[0] == ("1", str(len(quantization["methods"]["forward"]["sensitivity"]))), result.stderr
    shown = audiodeploy("inspect", "w.pte", cwd=tmp_path)
    assert shown.returncode == 0 and "warning: int8 output SNR" in shown.stdout, shown.stderr


def test_int8_vocoder_calibrated_on_a_file_longer_than_its_range_is_cut_into_windows(tmp_path):
    """4 s of audio (344 frames) through a tiny HiFi-GAN exported for 0.5 s (44 frames): 8 windows of 44 frames,
    the last moved back to end at the file's end. (A range of 1-10 s was an internal error: the folded program's
    guard refused more than 160 frames; tests/recipes/test_quantized.py checks that without lowering, here a
    fixed length keeps XNNPACK's passes quick.)"""
    soundfile.write(tmp_path / "speech.wav", speech_like(22_050, 4.0, 1), 22_050)
    result = audiodeploy("export", "hifigan", "--variant", "tiny-v3", "--seconds", "0.5", "--quantize", "int8-static",
                         "--calibrate", "speech.wav", "-o", "h.pte", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    sidecar = json.loads((tmp_path / "h.json").read_text())
    assert sidecar["lowering"]["quantization"]["calibration"] == "8 given inputs"
