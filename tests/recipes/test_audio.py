"""The vocoders' mel front ends."""

from __future__ import annotations

import math

import numpy as np
import torch

from audiodeploy import recipes
from audiodeploy.recipes import MelSpectrogram


def tone(seconds: float, sample_rate: int) -> np.ndarray:
    time = np.arange(int(seconds * sample_rate)) / sample_rate
    return (0.3 * np.sin(2 * math.pi * 220 * time)).astype(np.float32)


def test_speecht5_hifigan_front_end_is_speecht5_log_mel():
    mel = recipes.get("speecht5-hifigan").build("tiny").mel
    assert mel is not None and mel.flavor == "speecht5"
    features = mel(tone(1.0, 16_000))
    assert features.shape == (1, 63, 80) and features.dtype == torch.float32
    # log10 of mel power: a loud tone is far above the 1e-10 floor in its band.
    assert features.max() > -1 and features.min() >= -10


def test_univnet_front_end_is_univnet_log_mel():
    mel = recipes.get("univnet").build("tiny").mel
    assert mel is not None and mel.flavor == "univnet"
    features = mel(torch.from_numpy(tone(1.0, 24_000)))
    assert features.shape == (1, 93, 100)
    # Natural log of mel magnitudes clipped at 1e-5.
    assert features.min() >= math.log(1e-5) - 1e-4 and features.max() > -3


def test_a_vocoder_resynthesizes_a_waveform_of_its_mel_length():
    built = recipes.get("speecht5-hifigan").build("tiny")
    assert built.mel is not None
    mel = built.mel(tone(1.0, built.sample_rate))
    with torch.no_grad():
        waveform = built.module(mel)
    assert waveform.shape == (1, mel.shape[1] * built.input.samples_per_step)


def test_front_end_round_trips_through_a_dictionary():
    mel = recipes.get("univnet").build("tiny").mel
    assert mel is not None
    assert MelSpectrogram.from_dict(mel.to_dict()) == mel


def test_speecht5_hifigan_front_end_handles_any_duration():
    # SpeechT5's extractor takes milliseconds and slices with them: they must reach it as integers.
    mel = recipes.get("speecht5-hifigan").build("tiny").mel
    assert mel is not None
    assert mel(tone(2.5, 16_000)).shape == (1, 157, 80)
