"""A codec through the command line and the runtime: `export dac` writes one program with an encode and a decode
method, `run` encodes audio of any length to codes and decodes codes to a wav, as eager PyTorch does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch

from audiodeploy import recipes, runtime
from audiodeploy.program.audio import CODEC_CLIPPING_CAUSE
from audiodeploy.recipes.spec import LengthRange
from tests.cli import assert_clean_error, audiodeploy, snapshot

RATE, HOP = 16_000, 320


@pytest.fixture(scope="module")
def eager():
    """The exported program's model, eagerly: the same recipe, variant and seed (synthetic weights)."""
    return recipes.get("dac").build(variant="tiny", length_range=LengthRange(0.5, 2.0))


def speech_like(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.3 * t)).astype(np.float32)


def test_export_writes_one_delegate_per_method_with_equal_codes(codec_model):
    sidecar = json.loads(codec_model.with_suffix(".json").read_text())
    methods = sidecar["lowering"]["methods"]
    assert {name: m["delegates"] for name, m in methods.items()} == {"encode": 1, "decode": 1}
    model = sidecar["model"]
    assert model["max_abs_diff_vs_eager"] == 0.0  # the codes, equal
    assert model["decoder"]["codebook_size"] == 64 and model["decoder"]["input"]["feature_size"] == 2
    shown = audiodeploy("inspect", str(codec_model), "--load")
    assert shown.returncode == 0, shown.stderr
    assert "task: codec: encode gives 2 codebooks of 64 entries, a frame every 320 samples" in shown.stdout


def test_run_round_trips_audio_longer_than_the_program_takes_as_eager_does(codec_model, eager, tmp_path):
    """5.3 s through a program of at most 2 s: windows both ways, each frame (sample) from one window away from its
    edges; the codes equal one eager run over the whole file, the decoded wav eager's decode of them."""
    audio = speech_like(5.3)
    soundfile.write(tmp_path / "speech.wav", audio, RATE)
    encoded = audiodeploy("run", str(codec_model), "speech.wav", "-o", "codes.npy", cwd=tmp_path)
    assert encoded.returncode == 0, encoded.stderr
    codes = np.load(tmp_path / "codes.npy")
    assert codes.shape == (2, 265) and codes.dtype == np.int64
    assert "codes of shape (2, 265) (codebooks, frames), int64" in encoded.stdout
    with torch.no_grad():
        expected = eager.module(torch.from_numpy(audio)[None])[0].T.numpy()
    assert np.array_equal(codes, expected)
    decoded = audiodeploy("run", str(codec_model), "codes.npy", cwd=tmp_path)  # named after the input
    assert decoded.returncode == 0, decoded.stderr
    back, rate = soundfile.read(tmp_path / "codes.decoded.wav", dtype="float32")
    with torch.no_grad():
        reference = eager.decoder.module(torch.from_numpy(codes.T.copy())[None])[0].numpy()
    assert rate == RATE and back.shape == reference.shape == (265 * HOP,)
    # A 16-bit wav of the same waveform: half a step of rounding, and the recipe's tolerance.
    assert np.abs(back - np.clip(reference, -1, 1)).max() < 1e-3 + 2**-15


def test_runtime_codec_encodes_and_decodes_arrays(codec_model, eager, tmp_path):
    codec = runtime.load(codec_model)
    assert isinstance(codec, runtime.Codec)
    assert (codec.codebooks, codec.codebook_size, codec.hop) == (2, 64, HOP)
    audio = speech_like(1.0)
    codes = codec.encode(audio, sample_rate=RATE)
    with torch.no_grad():
        assert np.array_equal(codes, eager.module(torch.from_numpy(audio)[None])[0].T.numpy())
        reference = eager.decoder.module(torch.from_numpy(codes.T.copy())[None])[0]
    waveform = codec.decode(codes[None])  # (1, codebooks, frames), as transformers batches them
    assert waveform.sample_rate == RATE
    assert torch.allclose(waveform.samples, reference, atol=1e-3)
    written = codec.decode_to_file(codes, tmp_path / "back.wav")
    # A clipped decode blames the codes or the loudness of what was encoded, not a mel.
    assert written.samples == reference.numel() and written.clipping_cause == CODEC_CLIPPING_CAUSE


@pytest.mark.parametrize(
    "codes, words",
    [
        (np.zeros((3, 10), dtype=np.int64), ("shape (3, 10)", "(2, frames)")),
        (np.full((2, 10), 64, dtype=np.int64), ("outside the codebooks' 64 entries", "frame 0", "0 to 63")),
        (np.zeros((2, 10), dtype=np.float32), ("float32", "int64 codebook indices")),
    ],
)
def test_codes_it_cannot_decode_are_one_line_errors_and_nothing_is_written(codec_model, tmp_path, codes, words):
    np.save(tmp_path / "codes.npy", codes)
    before = snapshot(tmp_path)
    result = audiodeploy("run", str(codec_model), "codes.npy", "-o", "back.wav", cwd=tmp_path)
    assert_clean_error(result, *words)
    assert snapshot(tmp_path) == before


def test_a_codec_output_named_for_the_other_direction_is_refused(codec_model, tmp_path):
    soundfile.write(tmp_path / "speech.wav", speech_like(0.5), RATE)
    result = audiodeploy("run", str(codec_model), "speech.wav", "-o", "codes.wav", cwd=tmp_path)
    assert_clean_error(result, "-o codes.wav", "writes a npy file")
    result = audiodeploy("bench", "dac", "--variant", "tiny", "--method", "forward")
    assert_clean_error(result, "--method forward", "dac's program has an encode and a decode method")
