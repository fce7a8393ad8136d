"""A codec that runs on its own chunks through the command line and the runtime: `export encodec --variant
tiny-48khz` (EnCodec at 48 kHz, stereo, each chunk normalized by its loudness; 0.1 s chunks at test size) writes one
program whose methods take one chunk; `run` encodes a stereo file of any length and rate to a .npz of codes and
scales and decodes it back, as transformers' feature extractor, `encode` and `decode` do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from audiodeploy import recipes, runtime
from audiodeploy.program.codes import ChunkedCodes
from tests.cli import assert_clean_error, audiodeploy, snapshot

RATE, CHUNK, STRIDE, FRAMES = 48_000, 4_800, 4_752, 15


@pytest.fixture(scope="module")
def chunked_codec(chunked_codec_model) -> Path:
    return chunked_codec_model


@pytest.fixture(scope="module")
def model():
    """The exported program's transformers model, eagerly: the same recipe, variant and seed (synthetic weights)."""
    return recipes.get("encodec").build(variant="tiny-48khz").module.model


def stereo(samples: int, seed: int = 0) -> np.ndarray:
    """`(2, samples)`: two different tones under noise, so that a channel swap or a mix-down would show."""
    t = np.arange(samples) / RATE
    noise = np.random.default_rng(seed).standard_normal((2, samples))
    tones = np.stack([np.sin(2 * np.pi * 220 * t), 0.5 * np.sin(2 * np.pi * 330 * t)])
    return (0.2 * tones + 0.02 * noise).astype(np.float32)


def transformers_round_trip(model, audio: np.ndarray) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """What a transformers user gets: the feature extractor pads to whole chunks, `encode` gives every chunk's
    codes and scale, `decode` overlap-adds them; the audio cut back to the input's length."""
    from transformers import EncodecFeatureExtractor

    config = model.config
    extractor = EncodecFeatureExtractor(
        feature_size=2, sampling_rate=RATE, chunk_length_s=config.chunk_length_s, overlap=config.overlap
    )
    inputs = extractor(raw_audio=[audio], sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        encoded = model.encode(inputs["input_values"], inputs["padding_mask"], bandwidth=3.0)
        decoded = model.decode(encoded.audio_codes, encoded.audio_scales, inputs["padding_mask"]).audio_values
    return encoded.audio_codes[:, 0], encoded.audio_scales, decoded[0, :, : audio.shape[1]]


def test_export_writes_one_delegate_per_method_and_the_chunks_in_the_sidecar(chunked_codec):
    sidecar = json.loads(chunked_codec.with_suffix(".json").read_text())
    methods = sidecar["lowering"]["methods"]
    assert {name: m["delegates"] for name, m in methods.items()} == {"encode": 1, "decode": 1}
    model = sidecar["model"]
    assert model["input"]["channels"] == 2 and model["input"]["max_length"] == CHUNK
    assert model["decoder"]["chunks"] == {"stride": STRIDE, "scaled": True}
    shown = audiodeploy("inspect", str(chunked_codec))
    assert shown.returncode == 0, shown.stderr
    assert "stereo chunks of 0.1 s every 0.099 s, each chunk's codes and its scale in a .npz" in shown.stdout


@pytest.mark.parametrize("samples", [1_000, CHUNK, STRIDE * 3 + 1])
def test_the_codes_and_the_audio_are_transformers_own(chunked_codec, model, samples):
    """One chunk, exactly one chunk (two: the second starts before the first ends), and four chunks whose last
    holds one sample: the codes and scales of every chunk that starts inside the audio equal transformers' (which
    also encodes the padding after the last; nothing of it reaches the audio), and the decoded audio is its."""
    codec = runtime.load(chunked_codec)
    assert isinstance(codec, runtime.ChunkedCodec)
    assert (codec.channels, codec.chunk_samples, codec.codebooks, codec.codebook_size) == (2, CHUNK, 2, 1024)
    assert codec.program.weight_cache  # each constant packed once: the codebooks' search and lookups read them apart
    audio = stereo(samples)
    expected_codes, expected_scales, expected_audio = transformers_round_trip(model, audio)
    encoded = codec.encode(audio)
    chunks = -(-samples // STRIDE)
    assert encoded.codes.shape == (chunks, 2, FRAMES) and encoded.samples == samples
    assert np.array_equal(encoded.codes, expected_codes[:chunks].numpy())
    assert all(index * STRIDE >= samples for index in range(chunks, expected_codes.shape[0]))
    assert encoded.scales is not None
    assert np.allclose(encoded.scales, [float(s) for s in expected_scales[:chunks]], rtol=1e-5)
    decoded = codec.decode(encoded)
    assert decoded.samples.shape == (2, samples) and decoded.sample_rate == RATE
    assert torch.allclose(decoded.samples, expected_audio, atol=1e-5)


def test_run_round_trips_a_stereo_file_at_another_rate(chunked_codec, tmp_path):
    """A 44.1 kHz stereo file: resampled per channel to 48 kHz, encoded to a .npz, decoded to a 48 kHz stereo wav
    of as many samples as the resampled audio; the wav is the runtime's decode, streamed chunk by chunk."""
    audio = stereo(13_000, seed=1)
    soundfile.write(tmp_path / "music.wav", audio.T, 44_100)
    encoded = audiodeploy("run", str(chunked_codec), "music.wav", cwd=tmp_path)
    assert encoded.returncode == 0, encoded.stderr
    samples = -(-13_000 * 160 // 147)  # 44.1 kHz to 48 kHz
    chunks = -(-samples // STRIDE)
    assert f"codes of shape ({chunks}, 2, {FRAMES}) (chunks, codebooks, frames), int64, and a scale" in encoded.stdout
    codes = ChunkedCodes.load(tmp_path / "music.codes.npz")
    assert codes.samples == samples and codes.scales is not None and codes.scales.dtype == np.float32
    decoded = audiodeploy("run", str(chunked_codec), "music.codes.npz", "-o", "back.wav", cwd=tmp_path)
    assert decoded.returncode == 0, decoded.stderr
    back, rate = soundfile.read(tmp_path / "back.wav", dtype="float32")
    assert rate == RATE and back.shape == (samples, 2)
    reference = runtime.load(chunked_codec).decode(codes).samples.numpy()
    assert np.abs(back.T - np.clip(reference, -1, 1)).max() <= 2**-15 + 1e-6  # 16-bit rounding


def test_a_mono_file_plays_on_both_channels(chunked_codec, tmp_path):
    codec = runtime.load(chunked_codec)
    mono = stereo(6_000)[0]
    soundfile.write(tmp_path / "mono.wav", mono, RATE, subtype="FLOAT")
    from_file = codec.encode(tmp_path / "mono.wav")
    assert np.array_equal(from_file.codes, codec.encode(np.stack([mono, mono])).codes)


def test_decoding_to_a_file_streams_the_same_samples(chunked_codec, tmp_path):
    codec = runtime.load(chunked_codec)
    codes = codec.encode(stereo(20_000))
    written = codec.decode_to_file(codes, tmp_path / "out.wav")
    assert (written.samples, written.windows) == (20_000, codes.chunks)
    back = soundfile.read(tmp_path / "out.wav", dtype="float32")[0].T
    assert np.abs(back - np.clip(codec.decode(codes).samples.numpy(), -1, 1)).max() <= 2**-15 + 1e-6


def _codes(tmp_path: Path, **changes: object) -> None:
    arrays: dict[str, object] = {
        "codes": np.zeros((2, 2, FRAMES), dtype=np.int64),
        "scales": np.ones(2, dtype=np.float32),
        "samples": np.array(6_000),
    }
    arrays.update(changes)
    np.savez(tmp_path / "codes.npz", **{name: value for name, value in arrays.items() if value is not None})


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"codes": np.zeros((2, 3, FRAMES), dtype=np.int64)}, ("shape (2, 3, 15)", "(chunks, 2, 15)")),
        ({"codes": np.full((2, 2, FRAMES), 1024)}, ("outside the codebooks' 1024 entries", "chunk 0", "0 to 1023")),
        ({"scales": None}, ("has no scales", "need")),
        ({"scales": np.array([1.0, np.nan], dtype=np.float32)}, ("not one finite, non-negative number per chunk",)),
        ({"samples": np.array(20_000)}, ("2 chunks do not stand for 20000 samples",)),
        ({"samples": None}, ("without 'codes' and 'samples'",)),
    ],
)
def test_codes_it_cannot_decode_are_one_line_errors_and_nothing_is_written(chunked_codec, tmp_path, changes, words):
    _codes(tmp_path, **changes)
    before = snapshot(tmp_path)
    result = audiodeploy("run", str(chunked_codec), "codes.npz", "-o", "back.wav", cwd=tmp_path)
    assert_clean_error(result, "codes.npz", *words)
    assert snapshot(tmp_path) == before


def test_what_does_not_fit_its_chunks_is_refused_in_one_line(chunked_codec, tmp_path):
    soundfile.write(tmp_path / "speech.wav", stereo(3_000).T, RATE)
    soundfile.write(tmp_path / "surround.wav", np.zeros((3_000, 4), dtype=np.float32), RATE)
    _codes(tmp_path)
    np.save(tmp_path / "codes.npy", np.zeros((2, 30), dtype=np.int64))
    (tmp_path / "junk.npz").write_text("not an archive")
    before = snapshot(tmp_path)
    cases = [
        (("speech.wav", "-o", "codes.npy"), ("-o codes.npy", "writes a npz file")),
        (("codes.npy",), ("codes.npy", "codes are a .npz", "give that .npz")),
        (("codes.npz", "--window", "0.05"), ("--window and --overlap", "own chunks (0.1 s)")),
        (("surround.wav",), ("4 channels", "give a mono or stereo file")),
        (("junk.npz",), ("junk.npz", "not a .npz archive")),
    ]
    for arguments, words in cases:
        assert_clean_error(audiodeploy("run", str(chunked_codec), *arguments, cwd=tmp_path), *words)
    assert snapshot(tmp_path) == before
