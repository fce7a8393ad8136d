"""Input audio and mels that used to exhaust memory, block, fail with a library's message or pass silently, through
`audiodeploy run` as a user types it: each runs in bounded memory or ends with one line saying what to do."""

from __future__ import annotations

import os
import shlex
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.cli import OFFLINE, assert_clean_error, audiodeploy, audiodeploy_importing, snapshot

# Runs `audiodeploy ARGS...` as the only child of a fresh interpreter, so that RUSAGE_CHILDREN's peak is that of
# the command alone, and writes the peak (kB on Linux) to the file named first.
_PEAK_OF_CHILD = (
    "import resource, subprocess, sys; "
    "code = subprocess.run([sys.executable, '-m', 'audiodeploy', *sys.argv[2:]]).returncode; "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(code)"
)


def run_measured(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int, float]:
    """The command's result, its peak resident memory in bytes, and its wall time in seconds."""
    peak_file = tmp_path / "peak.txt"
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, str(peak_file), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=OFFLINE,
    )
    return result, int(peak_file.read_text()) * 1024, time.monotonic() - start


def tone(path: Path, seconds: float, rate: int) -> Path:
    soundfile.write(
        str(path), (0.3 * np.sin(np.arange(int(seconds * rate)) * 0.05)).astype(np.float32), rate, subtype="PCM_16"
    )
    return path


def with_header_rate(path: Path, rate: int) -> Path:
    """`path` with its fmt chunk saying `rate` (and the byte rate to match), samples untouched."""
    data = bytearray(path.read_bytes())
    fmt = data.index(b"fmt ") + 8
    struct.pack_into("<II", data, fmt + 4, rate, rate * 2 % 2**32)
    path.write_bytes(bytes(data))
    return path


# torchaudio's filter for 44101 -> 16000 Hz took 12 GB, and past 21 GB for 192001 Hz: the rates share no factor.
@pytest.mark.parametrize("rate", [44_101, 192_001])
def test_a_wav_at_a_rate_sharing_no_factor_with_the_models_transcribes_in_under_a_gib(asr_model, tmp_path, rate):
    wav = tone(tmp_path / f"at-{rate}.wav", 1.5, rate)
    result, peak, seconds = run_measured(tmp_path, "run", str(asr_model), str(wav))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "a transcript line"
    assert "Traceback" not in result.stderr
    assert peak < 2**30, f"peak {peak / 2**20:.0f} MiB"
    assert seconds < 180, seconds  # minutes of kernel building before; about 20 s here, most of it imports


@pytest.mark.parametrize("rate", [1, 2**31 - 1])
def test_a_header_rate_no_audio_has_is_one_line_before_any_work(asr_model, tmp_path, rate):
    # At 1 Hz, 1.5 s of samples would be 6.7 hours of audio to transcribe.
    wav = with_header_rate(tone(tmp_path / "in.wav", 1.5, 16_000), rate)
    result = audiodeploy("run", str(asr_model), str(wav))
    assert_clean_error(result, f"the header says {rate} Hz", "1000-768000 Hz", "sox -r", status=2)


def run_with_timeout(*args: str, seconds: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m audiodeploy {' '.join(args)}"],
        capture_output=True,
        text=True,
        timeout=seconds,
        env=OFFLINE,
    )


def test_a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer(asr_model, vocoder_model, tmp_path):
    os.mkfifo(tmp_path / "in.wav")
    os.mkfifo(tmp_path / "mel.npy")
    result = run_with_timeout("run", shlex.quote(str(asr_model)), shlex.quote(str(tmp_path / "in.wav")))
    assert_clean_error(result, "in.wav is a pipe", "save it to a file first", status=2)
    out = tmp_path / "out.wav"
    result = run_with_timeout(
        "run", shlex.quote(str(vocoder_model)), shlex.quote(str(tmp_path / "mel.npy")), "-o", shlex.quote(str(out))
    )
    assert_clean_error(result, "mel.npy is not a regular file", "save the mel to a file", status=2)
    assert not out.exists()


def test_process_substitution_is_refused_with_the_remedy_not_a_seek_error(asr_model, tmp_path):
    wav = tone(tmp_path / "speech.wav", 1.0, 16_000)
    result = run_with_timeout("run", shlex.quote(str(asr_model)), f"<(cat {shlex.quote(str(wav))})")
    line = assert_clean_error(result, "is a pipe, not a file", "save it to a file first", status=2)
    assert "Seek" not in line


def test_a_wav_header_counting_50_samples_of_6_s_is_one_line(asr_model, tmp_path):
    wav = tone(tmp_path / "six.wav", 6.0, 16_000)
    data = bytearray(wav.read_bytes())
    struct.pack_into("<I", data, data.index(b"data") + 4, 100)
    wav.write_bytes(bytes(data))
    result = audiodeploy("run", str(asr_model), str(wav))
    assert_clean_error(
        result, "the header says 50 samples but the file holds 6.00 s", "ffmpeg -ignore_length 1", status=2
    )


@pytest.fixture
def one_mib_disk(tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_while_streaming_a_vocoded_wav_is_one_line_and_keeps_the_previous_file(
    vocoder_model, tmp_path, one_mib_disk
):
    mel = tmp_path / "mel5k.npy"
    # 5000 frames of 256 samples at 16 bits: 2.4 MiB of wav for a 1 MiB disk.
    np.save(mel, np.random.default_rng(0).standard_normal((5000, 80)).astype(np.float32) - 4)
    target = one_mib_disk / "o.wav"
    target.write_bytes(b"the previous wav")
    before = snapshot(one_mib_disk)
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(target))
    line = assert_clean_error(result, str(target), "No space left on device", "previous file is unchanged", status=1)
    assert "LibsndfileError" not in line
    assert snapshot(one_mib_disk) == before  # no temporary left behind


@pytest.mark.parametrize(
    "content, words",
    [
        (np.zeros((100, 80), dtype=np.int32), ("int32 values, not floating point", "astype('float32')")),
        (np.array([["text"] * 80] * 10, dtype=object), ("not a numeric .npy array", "numpy.save")),
        (b"hello, I am not a mel\n", ("not a numeric .npy array", "numpy.save")),
        (np.array([["text"] * 80] * 10), ("not a numeric mel array", "<U4")),
    ],
    ids=["int32", "object-array", "text-file", "string-array"],
)
def test_a_mel_npy_that_is_not_floating_point_numbers_is_one_line(vocoder_model, tmp_path, content, words):
    mel = tmp_path / "mel.npy"
    if isinstance(content, bytes):
        mel.write_bytes(content)
    else:
        np.save(mel, content, allow_pickle=True)
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(tmp_path / "out.wav"))
    line = assert_clean_error(result, *words, status=2)
    assert "allow_pickle" not in line and "pickle.load" not in line
    assert not (tmp_path / "out.wav").exists()


# The library counts the clipped samples (WrittenAudio.clipping_warning); `run` prints the count as one "warning:"
# line, as `export` prints its fidelity warnings, since a fully clipped wav otherwise looks like a success.
def test_a_mel_far_off_scale_warns_once_that_the_wav_is_clipped(vocoder_model, tmp_path):
    mel = tmp_path / "loud.npy"
    np.save(mel, np.full((100, 80), 1e30, dtype=np.float32))
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(tmp_path / "loud.wav"))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: 100% of samples clipped at ±1 (25600 of 25600); the input is probably not on the scale this "
        "vocoder takes (its recipe's log-mel)"
    ], result.stderr
    on_scale = tmp_path / "on_scale.npy"
    # Log-mel values of order one, as the recipe's front end gives: no sample reaches ±1.
    np.save(on_scale, 0.5 * np.random.default_rng(0).standard_normal((100, 80)).astype(np.float32))
    result = audiodeploy("run", str(vocoder_model), str(on_scale), "-o", str(tmp_path / "on_scale.wav"))
    assert result.returncode == 0 and "clipped" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("model", "name", "make", "words"),
    [
        ("asr", "in.wav", "missing", "no such file"),
        ("asr", "in.wav", "directory", "is a directory"),
        ("asr", "in.wav", "not audio", "not a readable audio file"),
        ("vocoder", "mel.npy", "missing", "no such file"),
        ("vocoder", "mel.npy", "not audio", "not a numeric .npy array"),
    ],
)
def test_an_input_that_cannot_be_read_is_refused_before_torch_is_imported(
    asr_model, vocoder_model, tmp_path, model, name, make, words
):
    """The same one line as the runtime's, from a process that never imported torch or ExecuTorch (seconds)."""
    given = tmp_path / name
    if make == "directory":
        given.mkdir()
    elif make == "not audio":
        given.write_text("not audio\n")
    program = asr_model if model == "asr" else vocoder_model
    result, imported = audiodeploy_importing(
        "run", str(program), str(given), "-o", str(tmp_path / "out.wav"), modules=("torch", "executorch")
    )
    assert_clean_error(result, words)
    assert imported == [] and result.stderr.count("\n") == 1, (imported, result.stderr)
