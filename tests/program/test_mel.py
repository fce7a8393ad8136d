"""The model-free mel front ends: transformers' extractors, HiFi-GAN's formula and torchaudio's MelSpectrogram (Vocos),
frame for frame, by blocks; the Kaldi-style filterbanks of wav2vec2-bert against SeamlessM4TFeatureExtractor."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchaudio
from transformers import SeamlessM4TFeatureExtractor, SpeechT5FeatureExtractor, UnivNetFeatureExtractor
from transformers.audio_utils import mel_filter_bank

from audiodeploy.program.mel import Fbank, MelSpectrogram, htk_mel_filters, kaldi_mel_filters, slaney_mel_filters

# Log values. transformers keeps its spectrum as complex64 between a float64 FFT and float64 filters, we keep
# float64 throughout: the measured difference is a few float32 ulps (2.4e-7 speecht5, 4.8e-7 univnet).
TRANSFORMERS_ATOL = 1e-5
# The published HiFi-GAN formula run in float64 differs from ours only in operation order (measured: 0).
HIFIGAN_FLOAT64_ATOL = 1e-6

# The recipes' front ends (recipes/speecht5_hifigan.py and recipes/univnet.py front_end()).
SPEECHT5 = MelSpectrogram("speecht5", 16_000, 80, 256, 1024, 80.0, 7600.0)
UNIVNET = MelSpectrogram("univnet", 24_000, 100, 256, 1024, 0.0, None)
# The original HiFi-GAN V1 front end (config_v1.json), and one with a window shorter than its FFT.
HIFIGAN_V1 = MelSpectrogram("hifigan", 22_050, 80, 256, 1024, 0.0, 8000.0, n_fft=1024)
HIFIGAN_SHORT_WINDOW = MelSpectrogram("hifigan", 22_050, 80, 200, 800, 0.0, 8000.0, n_fft=1024)
# Vocos mel-24khz (charactr/vocos-mel-24khz config.yaml, recipes/vocos.py).
VOCOS = MelSpectrogram("vocos", 24_000, 100, 256, 1024, 0.0, None)
# torchaudio's MelSpectrogram built and run in float64 computes our formula: float32 ulps of the log (measured
# 2.4e-7). As Vocos runs it, in float32, its FFT and its float32 filter edges add rounding (measured: 3.2e-5 at
# most, 1.4e-6 median, over 2 s of speech-like audio).
TORCHAUDIO_FLOAT64_ATOL = 1e-6


def speech_like(samples: int, sample_rate: int, seed: int = 0) -> np.ndarray:
    """A rising chirp from 100 Hz to 0.4 × the sample rate, amplitude-modulated at 3 Hz, over a noise floor."""
    rng = np.random.default_rng(seed)
    time = np.arange(samples) / sample_rate
    frequency = 100.0 * (0.4 * sample_rate / 100.0) ** (time / max(time[-1], 1e-9))
    chirp = np.sin(2 * np.pi * np.cumsum(frequency) / sample_rate) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * time))
    return (0.5 * chirp + 0.02 * rng.standard_normal(samples)).astype(np.float32)


def speecht5_reference(mel: MelSpectrogram, audio: np.ndarray) -> np.ndarray:
    # SpeechT5's extractor takes its hop and window in (whole) milliseconds.
    extractor = SpeechT5FeatureExtractor(
        sampling_rate=mel.sample_rate,
        num_mel_bins=mel.mel_bins,
        hop_length=mel.hop_length * 1000 // mel.sample_rate,
        win_length=mel.win_length * 1000 // mel.sample_rate,
        fmin=mel.fmin,
        fmax=mel.max_frequency,
    )
    return extractor(audio_target=audio, sampling_rate=mel.sample_rate, return_tensors="np")["input_values"][0]


def univnet_reference(mel: MelSpectrogram, audio: np.ndarray) -> np.ndarray:
    extractor = UnivNetFeatureExtractor(
        sampling_rate=mel.sample_rate,
        num_mel_bins=mel.mel_bins,
        hop_length=mel.hop_length,
        win_length=mel.win_length,
        filter_length=mel.fft_length,
        fmin=mel.fmin,
        fmax=mel.fmax,
    )
    features = extractor(audio, sampling_rate=mel.sample_rate, return_tensors="np", pad_end=False, return_noise=False)
    return features["input_features"][0]


def hifigan_reference(mel: MelSpectrogram, audio: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """jik876/hifi-gan `meldataset.mel_spectrogram(center=False)` with `return_complex=True`; librosa's filter
    bank through transformers' bit-exact copy of it."""
    n_fft, hop = mel.fft_length, mel.hop_length
    waveform = torch.from_numpy(audio).to(dtype)[None, None]
    waveform = F.pad(waveform, (int((n_fft - hop) / 2), int((n_fft - hop) / 2)), mode="reflect")[:, 0]
    spectrum = torch.stft(
        waveform,
        n_fft,
        hop_length=hop,
        win_length=mel.win_length,
        window=torch.hann_window(mel.win_length, dtype=dtype),
        center=False,
        onesided=True,
        return_complex=True,
    )
    magnitude = torch.sqrt(spectrum.real**2 + spectrum.imag**2 + 1e-9)
    basis = mel_filter_bank(
        n_fft // 2 + 1, mel.mel_bins, mel.fmin, mel.max_frequency, mel.sample_rate, "slaney", "slaney", dtype=np.float32
    )
    mel_spectrum = torch.matmul(torch.from_numpy(basis.T).to(dtype), magnitude)
    return torch.log(torch.clamp(mel_spectrum, min=1e-5))[0].T.to(torch.float32).numpy()


def vocos_reference(mel: MelSpectrogram, audio: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """vocos `MelSpectrogramFeatures(padding="center")`: torchaudio's MelSpectrogram, then `safe_log`. Built under
    `dtype` as the default dtype, so that its filter bank and window are computed in it, not only cast to it."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        transform = torchaudio.transforms.MelSpectrogram(
            sample_rate=mel.sample_rate,
            n_fft=mel.fft_length,
            hop_length=mel.hop_length,
            n_mels=mel.mel_bins,
            center=True,
            power=1,
        )
    finally:
        torch.set_default_dtype(default)
    assert transform.mel_scale.fb.dtype == dtype
    features = torch.log(torch.clip(transform(torch.from_numpy(audio).to(dtype)), min=1e-7))
    return features.T.to(torch.float32).numpy()


def ours(mel: MelSpectrogram, audio: np.ndarray) -> np.ndarray:
    features = mel(audio)
    assert features.dtype == torch.float32 and features.shape == (1, mel.frame_count(audio.size), mel.mel_bins)
    return features[0].numpy()


# Lengths: the shortest valid, not multiples of the hop, and a few seconds.
@pytest.mark.parametrize("samples", [513, 1000, 16_017, 40_000])
def test_speecht5_fp32_matches_transformers_extractor(samples: int):
    audio = speech_like(samples, SPEECHT5.sample_rate, seed=samples)
    expected = speecht5_reference(SPEECHT5, audio)
    actual = ours(SPEECHT5, audio)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=TRANSFORMERS_ATOL, rtol=0)


def test_speecht5_fp32_window_not_a_power_of_two_uses_next_power_fft():
    # 25 ms / 10 ms at 16 kHz: SpeechT5's extractor pads the 400-sample frames to a 512-point FFT.
    mel = MelSpectrogram("speecht5", 16_000, 80, 160, 400, 80.0, 7600.0)
    audio = speech_like(8_123, mel.sample_rate)
    assert mel.fft_length == 512
    np.testing.assert_allclose(ours(mel, audio), speecht5_reference(mel, audio), atol=TRANSFORMERS_ATOL, rtol=0)


@pytest.mark.parametrize("samples", [385, 1000, 24_100, 50_001])
def test_univnet_fp32_matches_transformers_extractor(samples: int):
    audio = speech_like(samples, UNIVNET.sample_rate, seed=samples)
    expected = univnet_reference(UNIVNET, audio)
    actual = ours(UNIVNET, audio)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=TRANSFORMERS_ATOL, rtol=0)


@pytest.mark.parametrize("mel", [HIFIGAN_V1, HIFIGAN_SHORT_WINDOW], ids=["v1", "window-shorter-than-fft"])
@pytest.mark.parametrize("samples", [513, 22_050 + 77])
def test_hifigan_fp64_matches_published_formula(mel: MelSpectrogram, samples: int):
    audio = speech_like(samples, mel.sample_rate, seed=samples)
    expected = hifigan_reference(mel, audio, torch.float64)
    actual = ours(mel, audio)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=HIFIGAN_FLOAT64_ATOL, rtol=0)


def test_hifigan_fp32_published_formula_is_within_float32_stft_error():
    # The formula as published runs in float32: a quiet band next to a loud one carries the FFT's rounding
    # (measured: 1.5e-5 at most, 3e-7 median).
    audio = speech_like(22_050, HIFIGAN_V1.sample_rate)
    difference = np.abs(ours(HIFIGAN_V1, audio) - hifigan_reference(HIFIGAN_V1, audio, torch.float32))
    assert difference.max() < 1e-4 and np.median(difference) < 1e-6


@pytest.mark.parametrize("samples", [513, 1000, 24_000, 50_001])
def test_vocos_fp64_matches_torchaudio_mel_spectrogram(samples: int):
    audio = speech_like(samples, VOCOS.sample_rate, seed=samples)
    expected = vocos_reference(VOCOS, audio, torch.float64)
    actual = ours(VOCOS, audio)
    assert actual.shape == expected.shape == (1 + samples // 256, 100)
    np.testing.assert_allclose(actual, expected, atol=TORCHAUDIO_FLOAT64_ATOL, rtol=0)


def test_vocos_fp32_torchaudio_is_within_float32_stft_error():
    audio = speech_like(48_000, VOCOS.sample_rate)
    difference = np.abs(ours(VOCOS, audio) - vocos_reference(VOCOS, audio, torch.float32))
    assert difference.max() < 1e-4 and np.median(difference) < 3e-6


def test_vocos_front_end_takes_no_fft_longer_than_its_window():
    assert VOCOS.fft_length == 1024 and VOCOS.padding == 512
    # A window that is not a power of two: the FFT stays as long (torchaudio's n_fft is the window).
    assert MelSpectrogram("vocos", 24_000, 100, 300, 1200, 0.0, None).fft_length == 1200
    with pytest.raises(ValueError, match=r"n_fft is its win_length \(1024\), not 2048"):
        MelSpectrogram("vocos", 24_000, 100, 256, 1024, 0.0, None, n_fft=2048)


def test_htk_filters_equal_torchaudio_melscale_fbanks():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        expected = torchaudio.functional.melscale_fbanks(513, 0.0, 12_000.0, 100, 24_000).numpy()
    finally:
        torch.set_default_dtype(default)
    np.testing.assert_allclose(htk_mel_filters(1024, 100, 0.0, 12_000.0, 24_000), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["transformers", "librosa"])
def test_slaney_filters_equal_transformers_mel_filter_bank(dtype: type[np.floating]):
    actual = slaney_mel_filters(1024, 80, 0.0, 8000.0, 22_050, dtype=dtype)
    expected = mel_filter_bank(513, 80, 0.0, 8000.0, 22_050, norm="slaney", mel_scale="slaney", dtype=dtype)
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


class RecordingReader:
    """`read(a, b)` over an array that checks every request stays inside the signal and records it."""

    def __init__(self, audio: np.ndarray) -> None:
        self.audio = audio
        self.requests: list[tuple[int, int]] = []

    def __call__(self, start: int, stop: int) -> np.ndarray:
        assert 0 <= start <= stop <= self.audio.size, (start, stop)
        self.requests.append((start, stop))
        return self.audio[start:stop].copy()

    @property
    def samples_read(self) -> int:
        return sum(stop - start for start, stop in self.requests)


@pytest.mark.parametrize(
    "mel", [SPEECHT5, UNIVNET, HIFIGAN_SHORT_WINDOW, VOCOS], ids=["speecht5", "univnet", "hifigan", "vocos"]
)
def test_blocks_anywhere_equal_slices_of_the_whole(mel: MelSpectrogram):
    audio = speech_like(30_001, mel.sample_rate)
    whole = ours(mel, audio)
    count = whole.shape[0]
    middle = count // 2
    for start, stop in [(0, 1), (0, 7), (3, 20), (middle, middle + 1), (middle, middle + 40), (count - 5, count),
                        (count - 1, count), (0, count), (middle, middle)]:  # fmt: skip
        reader = RecordingReader(audio)
        block = mel.frames(reader, audio.size, start, stop)
        assert block.dtype == np.float32 and block.shape == (stop - start, mel.mel_bins)
        np.testing.assert_array_equal(block, whole[start:stop], err_msg=f"frames {start}:{stop}")
    # Consecutive blocks of an odd size cover the file as one call does.
    blocks = [mel.frames(RecordingReader(audio), audio.size, start, min(start + 37, count)) for start in
              range(0, count, 37)]  # fmt: skip
    np.testing.assert_array_equal(np.concatenate(blocks), whole)


@pytest.mark.parametrize(
    "mel", [SPEECHT5, UNIVNET, HIFIGAN_SHORT_WINDOW, VOCOS], ids=["speecht5", "univnet", "hifigan", "vocos"]
)
def test_a_middle_block_reads_only_its_windows(mel: MelSpectrogram):
    audio = speech_like(60_000, mel.sample_rate)
    reader = RecordingReader(audio)
    mel.frames(reader, audio.size, 100, 110)
    assert len(reader.requests) == 1
    assert reader.samples_read == 9 * mel.hop_length + mel.win_length


def test_a_first_block_reads_the_samples_its_padding_reflects():
    audio = speech_like(60_000, SPEECHT5.sample_rate)
    reader = RecordingReader(audio)
    SPEECHT5.frames(reader, audio.size, 0, 1)
    # Frame 0 covers positions -512..511: the samples 0..511 and their mirror 1..512.
    assert reader.requests == [(0, SPEECHT5.padding + 1)]


@pytest.mark.parametrize("mel", [SPEECHT5, UNIVNET, HIFIGAN_V1, VOCOS], ids=["speecht5", "univnet", "hifigan", "vocos"])
def test_audio_shorter_than_one_frame_is_refused(mel: MelSpectrogram):
    assert mel.frame_count(mel.min_samples) >= 1
    with pytest.raises(ValueError, match=rf"too short .* at least {mel.min_samples} "):
        mel(np.zeros(mel.min_samples - 1, dtype=np.float32))
    with pytest.raises(ValueError, match="too short"):
        mel.frames(RecordingReader(np.zeros(10, dtype=np.float32)), 10, 0, 1)


def test_blocks_outside_the_frames_are_refused():
    with pytest.raises(ValueError, match="outside the 63 frames"):
        SPEECHT5.frames(RecordingReader(np.zeros(16_000, dtype=np.float32)), 16_000, 60, 64)


@pytest.mark.parametrize("mel", [SPEECHT5, UNIVNET, HIFIGAN_V1, VOCOS], ids=["speecht5", "univnet", "hifigan", "vocos"])
def test_front_end_round_trips_through_a_dictionary(mel: MelSpectrogram):
    assert MelSpectrogram.from_dict(mel.to_dict()) == mel


def test_a_dictionary_written_before_n_fft_still_reads():
    old = {"flavor": "univnet", "sample_rate": 24_000, "mel_bins": 100, "hop_length": 256, "win_length": 1024,
           "fmin": 0.0, "fmax": None}  # fmt: skip
    assert MelSpectrogram.from_dict(old) == UNIVNET


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"flavor": "melgan"}, "field 'flavor' should be one of"),
        ({"hop_length": 256.0}, "field 'hop_length' should be an integer"),
        ({"fmax": "8000"}, "field 'fmax' should be a number"),
        ({"n_fft": 512}, r"n_fft \(512\) should be at least win_length \(1024\)"),
        ({"fmax": 30_000.0}, "fmax <= sample_rate / 2"),
    ],
)
def test_a_malformed_dictionary_is_refused(change: dict[str, object], message: str):
    with pytest.raises(ValueError, match=message):
        MelSpectrogram.from_dict({**HIFIGAN_V1.to_dict(), **change})
    missing = HIFIGAN_V1.to_dict()
    del missing["sample_rate"]
    with pytest.raises(ValueError, match="field 'sample_rate' is missing"):
        MelSpectrogram.from_dict(missing)


# Kaldi-style filterbanks (wav2vec2-bert). transformers rounds its spectrum to complex64; we keep float64. Measured on
# the signals below: 1.9e-6 at most on unnormalized log-mels of up to 28, 2.3e-5 after normalization (values up to 5).
FBANK = Fbank.seamless_m4t()
FBANK_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


def seamless_reference(audio: np.ndarray) -> np.ndarray:
    extractor = SeamlessM4TFeatureExtractor()
    return extractor(audio, sampling_rate=16_000, return_tensors="np")["input_features"][0]


# Even numbers of 10 ms frames (an odd one is the next test): 1 s (98 frames), 1.52 s (150), speech-like audio
# between silences (2.4 s, 238).
@pytest.mark.parametrize("samples", [16_000, 24_321, 38_400])
def test_fbank_fp32_normalized_matches_seamless_m4t_feature_extractor(samples: int):
    """The program's input, normalized as the program normalizes it (`Fbank.normalize`), is the extractor's output,
    row for row; the extractor's per-utterance normalization and its pairing of frames included."""
    audio = speech_like(samples, 16_000, seed=samples)
    if samples == 38_400:  # silence around a burst: bins near the floor
        audio[: samples // 3] = 0.0
        audio[2 * samples // 3 :] = 0.0
    rows = FBANK(audio)[0].numpy()
    frames = 1 + (samples - 400) // 160
    assert rows.shape == (frames // 2, 160) and FBANK.frame_count(samples) == frames // 2
    np.testing.assert_allclose(FBANK.normalize(rows), seamless_reference(audio), **FBANK_TOLERANCE)


def test_fbank_fp32_drops_an_odd_last_frame_the_extractor_pads():
    """With an odd frame count (1.01 s: 99 frames) the extractor pads a zero frame after normalizing; the rows we
    give are its unnormalized filterbanks of the first 98 frames."""
    audio = speech_like(16_160, 16_000)
    extractor = SeamlessM4TFeatureExtractor()
    frames = extractor._extract_fbank_features(audio)
    assert frames.shape == (99, 80) and seamless_reference(audio).shape == (50, 160)
    np.testing.assert_allclose(FBANK(audio)[0].numpy(), frames[:98].reshape(49, 160), **FBANK_TOLERANCE)


def test_fbank_filters_equal_transformers_kaldi_mel_filter_bank():
    expected = mel_filter_bank(257, 80, 20, 8000, 16_000, norm=None, mel_scale="kaldi", triangularize_in_mel_space=True)
    np.testing.assert_allclose(kaldi_mel_filters(512, 80, 20.0, 8000, 16_000), expected, rtol=1e-12, atol=1e-12)


def test_fbank_blocks_equal_slices_of_the_whole_and_read_only_their_frames():
    audio = speech_like(40_000, 16_000)
    whole = FBANK(audio)[0].numpy()
    count = whole.shape[0]
    for start, stop in [(0, 1), (3, 20), (count - 1, count), (0, count), (7, 7)]:
        reader = RecordingReader(audio)
        block = FBANK.frames(reader, audio.size, start, stop)
        np.testing.assert_array_equal(block, whole[start:stop], err_msg=f"rows {start}:{stop}")
        if stop > start:
            assert reader.requests == [(start * 320, (2 * stop - 1) * 160 + 400)]
    with pytest.raises(ValueError, match=f"outside the {count} rows"):
        FBANK.frames(RecordingReader(audio), audio.size, 0, count + 1)


def test_fbank_audio_shorter_than_one_row_is_refused_and_the_front_end_round_trips():
    assert FBANK.min_samples == 560 and FBANK.frame_count(560) == 1
    with pytest.raises(ValueError, match="too short for the fbank front end: 559 samples"):
        FBANK(np.zeros(559, dtype=np.float32))
    assert Fbank.from_dict(FBANK.to_dict()) == FBANK
    with pytest.raises(ValueError, match="field 'stride' is missing"):
        Fbank.from_dict({key: value for key, value in FBANK.to_dict().items() if key != "stride"})


def test_importing_the_module_imports_neither_transformers_nor_torch():
    code = "import sys, audiodeploy.program.mel; print(sorted({'transformers', 'torch'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
