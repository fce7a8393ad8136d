"""A codec whose methods carry their state from window to window, through the command line and the runtime:
`export encodec --variant tiny --seconds 0.25` (EnCodec at 24 kHz, causal, with an LSTM in its encoder and its
decoder) writes a program of 0.25 s windows (19 frames); `run` encodes a longer file in windows overlapping by 8 frames, each
resuming the LSTM where the window before left it, and the codes and audio are one long transformers run's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch

from audiodeploy import recipes, runtime
from audiodeploy.recipes.spec import LengthRange
from audiodeploy.runtime.model import WindowOptionError
from tests.cli import audiodeploy

RATE, HOP, WINDOW_FRAMES = 24_000, 320, 19


@pytest.fixture(scope="module")
def eager():
    """The exported program's model, eagerly: the same recipe, variant and seed (synthetic weights)."""
    return recipes.get("encodec").build(variant="tiny", length_range=LengthRange.fixed(0.25))


def speech_like(frames: int) -> np.ndarray:
    """Whole frames of audio: a last frame begun and not ended is zero-padded by the runtime, where transformers'
    convolutions pad each layer's input by reflection, so its codes may differ."""
    t = np.arange(frames * HOP) / RATE
    noise = np.random.default_rng(0).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.3 * t) + 0.02 * noise).astype(np.float32)


def long_run(eager, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' own encode of the whole audio, `(codebooks, frames)`, and its decode of those codes."""
    with torch.no_grad():
        codes = eager.long_run(torch.from_numpy(audio)[None])
        decoded = eager.decoder.long_run(codes)
    return codes[0].T.numpy(), decoded[0].numpy()


def test_export_writes_one_delegate_per_method_and_the_carried_state_in_the_sidecar(carried_codec_model):
    sidecar = json.loads(carried_codec_model.with_suffix(".json").read_text())
    methods = sidecar["lowering"]["methods"]
    assert {name: m["delegates"] for name, m in methods.items()} == {"encode": 1, "decode": 1}
    assert set(methods["encode"]["ops_outside_delegates"]) == {"dim_order_ops._to_dim_order_copy"}
    model = sidecar["model"]
    # The LSTM's h and c, one layer of 128; encode's convolutions reach 2 frames back before the LSTM and 6 after
    # it, decode's 6 before and under 2 after.
    state = [[1, 128], [1, 128]]
    assert model["carried"] == {"shapes": state, "resume_step": 2, "lead": 8}
    assert model["decoder"]["carried"] == {"shapes": state, "resume_step": 6, "lead": 8}
    assert "window_overlap" not in model
    shown = audiodeploy("inspect", str(carried_codec_model), "--load")
    assert shown.returncode == 0, shown.stderr
    assert (
        "windows carry the model's state to the next, overlapping by 8 frames (encode) and 8 (decode)" in shown.stdout
    )


@pytest.mark.parametrize("frames", [12, WINDOW_FRAMES, 172])
def test_codes_and_audio_of_any_length_are_one_long_runs(carried_codec_model, eager, frames):
    """Shorter than a window (zero-padded), one window, and sixteen windows: the codes equal transformers' over the
    whole audio, every one of them, and the decoded audio its decode of them."""
    codec = runtime.load(carried_codec_model)
    audio = speech_like(frames)
    expected_codes, expected_audio = long_run(eager, audio)
    codes = codec.encode(audio, sample_rate=RATE)
    assert codes.shape == expected_codes.shape == (2, frames)
    assert np.array_equal(codes, expected_codes)
    decoded = codec.decode(codes)
    assert decoded.samples.shape == (codes.shape[1] * HOP,)
    assert np.abs(decoded.samples.numpy() - expected_audio).max() < 1e-4


def test_run_round_trips_a_file_as_one_long_run(carried_codec_model, eager, tmp_path):
    audio = speech_like(127)
    soundfile.write(tmp_path / "speech.wav", audio, RATE, subtype="FLOAT")
    encoded = audiodeploy("run", str(carried_codec_model), "speech.wav", "-o", "codes.npy", cwd=tmp_path)
    assert encoded.returncode == 0, encoded.stderr
    expected_codes, expected_audio = long_run(eager, audio)
    assert np.array_equal(np.load(tmp_path / "codes.npy"), expected_codes)
    decoded = audiodeploy("run", str(carried_codec_model), "codes.npy", "-o", "back.wav", cwd=tmp_path)
    assert decoded.returncode == 0, decoded.stderr
    back, rate = soundfile.read(tmp_path / "back.wav", dtype="float32")
    assert rate == RATE and back.shape == expected_audio.shape
    assert np.abs(back - np.clip(expected_audio, -1, 1)).max() < 1e-4 + 2**-15  # 16-bit rounding


def test_an_overlap_shorter_than_the_lead_is_refused_with_the_reason(carried_codec_model):
    codec = runtime.load(carried_codec_model)
    with pytest.raises(WindowOptionError, match=r"at least 8 \(what the program's convolutions reach back"):
        codec.encode(speech_like(150), sample_rate=RATE, overlap_seconds=0.05)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda model: model["carried"].update(shapes=[[1, 64], [1, 64]]), r"encode method ends with inputs"),
        (lambda model: model.pop("carried"), r"the program takes 4 inputs, the sidecar describes 1"),
        (lambda model: model["decoder"]["carried"].update(shapes=[[2, 128], [2, 128]]), r"decode method ends with"),
    ],
    ids=["other-state", "no-state", "other-decoder-state"],
)
def test_a_sidecar_that_misdescribes_the_carried_state_is_one_clear_error(carried_codec_model, tmp_path, edit, message):
    from audiodeploy.program.description import DescriptionError

    program = tmp_path / "codec.pte"
    program.write_bytes(carried_codec_model.read_bytes())
    sidecar = json.loads(carried_codec_model.with_suffix(".json").read_text())
    edit(sidecar["model"])
    program.with_suffix(".json").write_text(json.dumps(sidecar))
    with pytest.raises(DescriptionError, match=message):
        runtime.load(program)
