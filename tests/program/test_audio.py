"""Reading audio block by block: the same samples as reading and resampling the whole file, and bad audio refused."""

from __future__ import annotations

import errno
import os
import struct

import numpy as np
import pytest
import soundfile
import torch
import torchaudio.functional

from audiodeploy.program import audio as audio_module
from audiodeploy.program.audio import AudioArray, AudioFile, AudioInputError, WavWriter


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


@pytest.mark.parametrize("file_rate", [48_000, 44_100])
def test_a_stereo_program_reads_each_channel_resampled_on_its_own(tmp_path, file_rate):
    """For a stereo program (channels 2) the channels are kept, each resampled as a whole-file resampling gives it,
    block by block; a mono file plays on both."""
    rng = np.random.default_rng(file_rate)
    channels = (0.3 * rng.standard_normal((2, file_rate // 2 + 77))).astype(np.float32)
    path = write(tmp_path / "a.wav", channels.T, file_rate)
    whole = torchaudio.functional.resample(torch.from_numpy(channels), file_rate, 48_000).numpy()
    with AudioFile(path, 48_000, channels=2) as audio:
        assert audio.total == whole.shape[1]
        for start, stop in [(0, 1), (1234, 9876), (audio.total - 100, audio.total)]:
            np.testing.assert_allclose(audio.read(start, stop), whole[:, start:stop], atol=1e-6)
    with AudioFile(write(tmp_path / "mono.wav", channels[0], 48_000), 48_000, channels=2) as audio:
        assert np.array_equal(audio.read(10, 500), np.stack([channels[0, 10:500]] * 2))
    assert np.array_equal(AudioArray(channels, 48_000, channels=2).read(5, 50), channels[:, 5:50])
    with pytest.raises(AudioInputError, match=r"shape \(3, 100\).*stereo samples shaped \(2, samples\)"):
        AudioArray(np.zeros((3, 100), dtype=np.float32), 48_000, channels=2)


def test_a_stereo_wav_is_written_block_by_block(tmp_path):
    left, right = np.linspace(-0.5, 0.5, 300, dtype=np.float32), np.full(300, 0.25, dtype=np.float32)
    with WavWriter(tmp_path / "s.wav", 48_000, channels=2) as writer:
        writer.write(np.stack([left[:100], right[:100]]))
        writer.write(np.stack([left[100:], np.full(200, 1.5, dtype=np.float32)]))
    assert (writer.samples, writer.clipped) == (300, 200)  # a sample clipped in either channel counts once
    back, rate = soundfile.read(tmp_path / "s.wav", dtype="float32")
    assert rate == 48_000 and back.shape == (300, 2)
    assert np.abs(back[:, 0] - left).max() <= 2**-15 and np.all(back[100:, 1] > 0.999)


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


# Rates whose torchaudio filter (one row per output phase, a whole input period long) would not fit in memory
# are resampled by the same filter evaluated only where it is not zero.


@pytest.mark.parametrize("file_rate", [22_050, 8_000, 48_000])
def test_the_sparse_filter_gives_torchaudios_samples(monkeypatch, file_rate):
    samples = (0.3 * np.random.default_rng(1).standard_normal(file_rate + 33)).astype(np.float32)
    expected = torchaudio.functional.resample(torch.from_numpy(samples), file_rate, 16_000).numpy()
    monkeypatch.setattr(audio_module, "_DENSE_FILTER_LIMIT", 0)
    ratio = audio_module._Ratio(file_rate, 16_000)
    assert not ratio.dense
    resampled = ratio.resample(samples)
    assert resampled.shape == expected.shape
    # torchaudio builds its filter in float32; the sparse one in float64, hence not bit for bit.
    np.testing.assert_allclose(resampled, expected, atol=1e-4)


@pytest.mark.parametrize("file_rate", [44_101, 192_001, 767_999])
def test_blocks_of_a_file_at_an_odd_rate_equal_the_whole_file_resampled_in_bounded_memory(tmp_path, file_rate):
    samples = (0.3 * np.sin(np.arange(file_rate + 555) * 0.01)).astype(np.float32)
    path = write(tmp_path / "odd.wav", samples, file_rate)
    with AudioFile(path, 16_000) as audio:
        ratio = audio._ratio
        assert not ratio.dense and ratio.up == 16_000  # the rates share no factor: 16000 phases
        whole = audio.read(0, audio.total)
        assert whole.size == audio.total == -(-(file_rate + 555) * 16_000 // file_rate)
        for start, stop in [(0, 1), (1234, 9876), (audio.total - 100, audio.total)]:
            np.testing.assert_allclose(audio.read(start, stop), whole[start:stop], atol=1e-6)
        _, taps = ratio._phase_taps()
        assert taps.nbytes < 40 * 2**20
    # A 0.01 rad/sample tone stays at 0.01 * file_rate / 16000 rad/sample: the pitch is exact.
    spectrum = np.abs(np.fft.rfft(whole * np.hanning(whole.size)))
    assert np.argmax(spectrum) / whole.size * 2 * np.pi == pytest.approx(0.01 * file_rate / 16_000, rel=2e-3)


@pytest.mark.parametrize("rate", [1, 999, 768_001, 2**31 - 1])
def test_a_rate_no_audio_has_is_refused_before_any_work(tmp_path, rate):
    path = tmp_path / "bad.wav"
    path.write_bytes(patched_rate(write(tmp_path / "ok.wav", np.zeros(1600, np.float32), 16_000, "PCM_16"), rate))
    with pytest.raises(AudioInputError, match=rf"the header says {rate} Hz, outside the 1000-768000 Hz"):
        AudioFile(path, 16_000)
    with pytest.raises(AudioInputError, match=rf"a sample rate of {rate} Hz"):
        AudioArray(np.zeros(1600, np.float32), 16_000, source_rate=rate)


def patched_rate(path, rate):
    data = bytearray(path.read_bytes())
    fmt = data.index(b"fmt ") + 8
    struct.pack_into("<II", data, fmt + 4, rate, rate * 2 % 2**32)
    return bytes(data)


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.wav")
    with pytest.raises(AudioInputError, match="is a pipe, not a file.*save it to a file first"):
        AudioFile(tmp_path / "pipe.wav", 16_000)  # opening it would wait for a writer forever


def with_data_size(path, size):
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, data.index(b"data") + 4, size)
    return bytes(data)


def test_a_wav_whose_header_counts_fewer_samples_than_it_holds_is_refused(tmp_path):
    six = write(tmp_path / "six.wav", np.zeros(6 * 16_000, np.float32), 16_000, "PCM_16")
    (tmp_path / "short.wav").write_bytes(with_data_size(six, 100))
    with pytest.raises(AudioInputError, match=r"the header says 50 samples but the file holds 6.00 s; .*ignore_length"):
        AudioFile(tmp_path / "short.wav", 16_000)


def test_chunks_after_the_data_or_a_truncated_file_are_not_a_disagreement(tmp_path):
    six = write(tmp_path / "six.wav", np.zeros(6 * 16_000, np.float32), 16_000, "PCM_16")
    listed = bytearray(six.read_bytes()) + b"LIST" + struct.pack("<I", 12) + b"INFOISFT\0\0\0\0"
    struct.pack_into("<I", listed, 4, len(listed) - 8)
    (tmp_path / "list.wav").write_bytes(bytes(listed))
    (tmp_path / "truncated.wav").write_bytes(six.read_bytes()[:50_000])
    (tmp_path / "junk.wav").write_bytes(six.read_bytes() + b"\1\2\3")
    for name, frames in [("list.wav", 96_000), ("truncated.wav", (50_000 - 44) // 2), ("junk.wav", 96_000)]:
        with AudioFile(tmp_path / name, 16_000) as audio:
            assert audio.total == frames, name


def test_a_streamed_wav_counts_its_clipped_samples(tmp_path):
    with WavWriter(tmp_path / "out.wav", 16_000) as writer:
        writer.write(np.array([0.5, 1.0, -3.0, 0.999], dtype=np.float32))
        writer.write(np.zeros(4, dtype=np.float32))
    assert (writer.clipped, writer.samples) == (2, 8)
    assert writer.clipping_warning.startswith("25% of samples clipped at ±1 (2 of 8)")
    audio, _ = soundfile.read(str(tmp_path / "out.wav"))
    assert audio[2] == -1.0


def test_a_failed_write_becomes_an_os_error_naming_the_target_and_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "out.wav"
    target.write_bytes(b"the previous file")

    def fail(self, data):
        raise soundfile.LibsndfileError(2, "System error.")

    with pytest.raises(OSError) as raised:
        with WavWriter(target, 16_000) as writer:
            monkeypatch.setattr(writer, "_free_bytes", lambda: 0)
            monkeypatch.setattr(soundfile.SoundFile, "write", fail)
            writer.write(np.zeros(100, dtype=np.float32))
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
    assert str(raised.value.strerror) == "No space left on device; the previous file is unchanged"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"] and target.read_bytes() == b"the previous file"
