"""The `encodec` recipe built, not lowered: one window's encode and decode modules, which carry the LSTM's state
from window to window, its bandwidths, its fixed length, and a checkpoint in transformers' `save_pretrained`
layout; at 48 kHz, one of the model's own stereo chunks and its scale. (The 24 kHz program lowered and run in windows
is tested in tests/test_cli_carried_codec.py, the 48 kHz one in tests/test_cli_chunked_codec.py.)"""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.program.description import CodecChunks
from audiodeploy.recipes import LengthRangeError, WeightsError
from audiodeploy.recipes.spec import LengthRange

HOP = 320


@pytest.fixture(scope="module")
def built():
    return recipes.get("encodec").build(variant="tiny", length_range=LengthRange.fixed(0.5))


def test_tiny_encodes_one_window_to_codes_and_decodes_them_to_as_many_samples(built):
    assert (built.input.min_length, built.input.max_length, built.input.length_multiple) == (12_160, 12_160, HOP)
    with torch.no_grad():
        codes, h, c = built.module(*built.example_inputs)
        audio = built.decoder.module(*built.decoder.inputs_for(codes))[0]
        # A first window (no state carried in) is transformers' own run over it.
        assert torch.equal(codes, built.long_run(built.example_inputs[0]))
        assert torch.allclose(audio, built.decoder.long_run(codes), atol=1e-5)
    assert codes.shape == (1, 38, 2) and codes.dtype == torch.int64
    assert h.shape == c.shape == (1, 38, 128)  # the LSTM's state after each frame
    # The synthetic codebooks are drawn (transformers starts them at zero: every code would be 0, every frame silent).
    assert codes.unique().numel() > 4
    assert audio.shape == (1, 38 * HOP) and audio.std() > 0.05
    assert built.decoder.input.min_length == built.decoder.input.max_length == 38
    described = built.describe()
    assert described.window_overlap is None
    assert described.carried is not None and (described.carried.resume_step, described.carried.lead) == (2, 8)


def test_a_window_resumed_with_the_long_runs_state_gives_its_codes_and_audio_from_its_lead_on(built):
    """Two windows of a 0.8 s input, the second 22 frames after the first: resumed at step 2 with the state the
    first gave after its step 23, the second's codes from frame 8 on are one long run's, and so is its audio."""
    carried = built.describe().carried
    assert carried is not None
    audio = 0.1 * torch.randn(1, 60 * HOP, generator=torch.Generator().manual_seed(3))
    start, resume = 22, torch.ones(1, 1)
    with torch.no_grad():
        expected = built.long_run(audio)
        _, h, c = built.module(audio[:, : 38 * HOP], *built.example_inputs[1:])
        step = start + carried.resume_step - 1
        codes, _, _ = built.module(audio[:, start * HOP :], h[:, step : step + 1], c[:, step : step + 1], resume)
        afresh, _, _ = built.module(audio[:, start * HOP :], *built.example_inputs[1:])
        assert torch.equal(codes[:, carried.lead :], expected[:, start + carried.lead :])
        assert not torch.equal(afresh[:, carried.lead :], expected[:, start + carried.lead :])
        decoder, decoder_carried = built.decoder, built.describe().decoder.carried
        whole = decoder.long_run(expected)
        _, h, c = decoder.module(*decoder.inputs_for(expected[:, :38]))
        step = start + decoder_carried.resume_step - 1
        waveform, _, _ = decoder.module(expected[:, start:], h[:, step : step + 1], c[:, step : step + 1], resume)
    lead = decoder_carried.lead * HOP
    assert torch.allclose(waveform[:, lead:], whole[:, start * HOP + lead :], atol=1e-5)


@pytest.mark.parametrize(
    "variant, codebooks",
    [("24khz-1.5kbps", 2), ("24khz-6kbps", 8), ("24khz-24kbps", 32), ("48khz-3kbps", 2), ("48khz-24kbps", 16)],
)
def test_each_bandwidth_encodes_to_its_codebooks(variant, codebooks):
    architecture = recipes.get("encodec").variant(variant).architecture
    config = recipes.get("encodec").transformers_config(architecture)
    assert recipes.get("encodec").codebooks(config, architecture) == (codebooks, 1024)


def test_a_range_of_lengths_is_refused_naming_the_lstm():
    with pytest.raises(LengthRangeError, match="LSTM is unrolled at one length.*--seconds"):
        recipes.get("encodec").build(variant="tiny", length_range=LengthRange(0.5, 2.0))


def test_a_save_pretrained_checkpoint_builds_the_codes_of_the_saved_model(tmp_path):
    from transformers import EncodecModel

    recipe = recipes.get("encodec")
    torch.manual_seed(7)
    saved = EncodecModel(recipe.transformers_config(recipe.variant("tiny").architecture)).eval()
    recipe.synthetic_init(saved)
    saved.save_pretrained(tmp_path / "my-encodec")
    loaded = recipe.build(variant="tiny", weights=str(tmp_path / "my-encodec"), length_range=LengthRange.fixed(0.5))
    waveform = loaded.example_inputs[0]
    with torch.no_grad():
        expected = saved.encode(waveform[:, None], bandwidth=1.5).audio_codes[0].transpose(1, 2)
        assert torch.equal(loaded.module(*loaded.example_inputs)[0], expected)


def test_at_48khz_the_program_takes_one_stereo_chunk_and_gives_its_codes_and_scale():
    """The model's own chunk (0.1 s at test size), whatever the recipe's default window: encode gives the chunk's
    codes and its loudness, decode takes both back to the chunk's stereo audio, as transformers' per-chunk steps
    do."""
    built = recipes.get("encodec").build(variant="tiny-48khz")
    assert built.input.shape(built.input.max_length) == (1, 2, 4800) and built.input.is_static
    waveform = built.example_inputs[0]
    with torch.no_grad():
        codes, scale = built.module(waveform)
        audio = built.decoder.module(codes, scale)
        expected_codes, expected_scale = built.module.model._encode_frame(waveform, 3.0)
    assert codes.shape == (1, 15, 2) and torch.equal(codes, expected_codes.transpose(1, 2))
    assert scale.shape == (1, 1) and torch.equal(scale, expected_scale)
    assert torch.allclose(scale, waveform.mean(1).pow(2).mean().sqrt() + 1e-8)
    assert audio.shape == (1, 2, 4800) and audio.std() > 0.001
    described = built.describe()
    assert described.decoder is not None and described.decoder.chunks == CodecChunks(stride=4752, scaled=True)
    assert described.input.channels == 2 and described.length_range_seconds == (0.1, 0.1)


def test_at_48khz_the_long_run_reference_is_transformers_over_the_audio_padded_as_its_feature_extractor_pads_it():
    """What benchmarks/codec_methods.py times eager and ONNX Runtime on, for long audio: every chunk's codes and
    scale, and the overlap-added decode, as a transformers user gets them."""
    from transformers import EncodecFeatureExtractor

    built = recipes.get("encodec").build(variant="tiny-48khz")
    model, config = built.module.model, built.module.model.config
    audio = 0.1 * torch.randn(1, 2, 3 * 4752 + 1, generator=torch.Generator().manual_seed(5))
    extractor = EncodecFeatureExtractor(
        feature_size=2, sampling_rate=48_000, chunk_length_s=config.chunk_length_s, overlap=config.overlap
    )
    inputs = extractor(raw_audio=[audio[0].numpy()], sampling_rate=48_000, return_tensors="pt")
    with torch.no_grad():
        expected = model.encode(inputs["input_values"], inputs["padding_mask"], bandwidth=3.0)
        codes, scales = built.long_run(audio)
        decoded = built.decoder.long_run(codes, scales)
        expected_audio = model.decode(expected.audio_codes, expected.audio_scales).audio_values
    assert codes.shape[1:] == (1, 2, 15) and torch.equal(codes, expected.audio_codes)
    assert torch.equal(scales, torch.cat([s.reshape(1, 1) for s in expected.audio_scales]))
    assert torch.allclose(decoded, expected_audio)


def test_at_48khz_another_length_is_refused_naming_the_chunks():
    with pytest.raises(LengthRangeError, match="own chunks of 0.1 s.*without --seconds.*--seconds 0.1"):
        recipes.get("encodec").build(variant="tiny-48khz", length_range=LengthRange.fixed(0.5))


def test_a_checkpoint_that_normalizes_without_chunks_is_refused(tmp_path):
    from transformers import EncodecModel

    recipe = recipes.get("encodec")
    config = recipe.transformers_config(recipe.variant("tiny").architecture)
    config.normalize = True
    EncodecModel(config).save_pretrained(tmp_path / "whole")
    with pytest.raises(WeightsError, match="loudness of its whole input.*windows"):
        recipe.build(variant="tiny", weights=str(tmp_path / "whole"), length_range=LengthRange.fixed(0.5))
