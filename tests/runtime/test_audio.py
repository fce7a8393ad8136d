"""Reading audio block by block: the same samples as reading and resampling the whole file, and bad audio refused."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch
import torchaudio.functional

from audiodeploy.runtime.audio import AudioArray, AudioFile, AudioInputError, WavWriter


def write(path, samples, rate, subtype="FLOAT"):
    soundfile.write(str(path), samples, rate, subtype=subtype)
    return path


@pytest.mark.parametrize("file_rate", [16_000, 22_050, 44_100, 8_000])
def test_blocks_of_a_resampled_stereo_file_equal_the_whole_file_resampled(tmp_path, file_rate):
    rng = np.random.default_rng(file_rate)
    left = (0.3 * rng.standard_normal(2 * file_rate + 77)).astype(np.float32)
    right = (0.3 * rng.standard_normal(left.size)).astype(np.float32)
    path = write(tmp_path / "a.wav", np.stack([left, right], axis=1), file_rate)
    whole = torchaudio.functional.resample(torch.from_numpy((left + right) / 2), file_rate, 16_000).numpy()
    with AudioFile(path, 16_000) as audio:
        assert audio.total == whole.size
        for start, stop in [(0, 1), (0, 4000), (1234, 9876), (audio.total - 100, audio.total), (0, audio.total)]:
            np.testing.assert_allclose(audio.read(start, stop), whole[start:stop], atol=1e-6)


def test_a_file_with_a_nan_sample_is_refused_with_its_position(tmp_path):
    samples = np.zeros(16_000, dtype=np.float32)
    samples[12_000] = np.nan
    with AudioFile(write(tmp_path / "nan.wav", samples, 16_000), 16_000) as audio:
        assert audio.read(0, 8000).size == 8000  # blocks before the NaN read fine
        with pytest.raises(AudioInputError, match=r"NaN or infinite samples \(the first at 0.75 s\)"):
            audio.read(8000, 16_000)


@pytest.mark.parametrize(
    "value, words",
    [
        (np.array([0.1, np.inf], dtype=np.float32), "NaN or infinite"),
        (np.array([0.1 + 1j, 0.2]), "complex"),
        (np.array(["a", "b"]), "non-numeric"),
        (np.zeros((2, 100), dtype=np.float32), "mono"),
        (np.zeros(0, dtype=np.float32), "empty"),
    ],
)
def test_arrays_that_are_not_finite_real_mono_audio_are_refused(value, words):
    with pytest.raises(AudioInputError, match=words):
        AudioArray(value, 16_000)


@pytest.mark.parametrize(
    "content, words",
    [(b"", "not a readable audio file"), (b"RIFF....WAVEfmt garbage", "not a readable audio file")],
)
def test_files_that_are_not_audio_are_refused(tmp_path, content, words):
    (tmp_path / "x.wav").write_bytes(content)
    with pytest.raises(AudioInputError, match=words):
        AudioFile(tmp_path / "x.wav", 16_000)


def test_a_directory_or_a_missing_file_is_refused(tmp_path):
    with pytest.raises(AudioInputError, match="is a directory"):
        AudioFile(tmp_path, 16_000)
    with pytest.raises(AudioInputError, match="no such file"):
        AudioFile(tmp_path / "missing.wav", 16_000)


def test_a_streamed_wav_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out.wav"
    target.write_bytes(b"the previous file")
    with pytest.raises(RuntimeError):
        with WavWriter(target, 16_000) as writer:
            writer.write(np.zeros(1000, dtype=np.float32))
            raise RuntimeError("interrupted half way")
    assert target.read_bytes() == b"the previous file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]
    with WavWriter(target, 16_000) as writer:
        writer.write(np.full(1000, 0.5, dtype=np.float32))
        writer.write(np.full(500, -0.5, dtype=np.float32))
    audio, rate = soundfile.read(str(target))
    assert rate == 16_000 and audio.size == 1500 and audio[0] == pytest.approx(0.5, abs=1e-4)
