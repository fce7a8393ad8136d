"""The vits recipe: its two export wrappers compute what transformers' `VitsModel` computes, and the exported
program, with the runtime's host part between its methods, speaks what eager `VitsModel` speaks for the same seed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch

import audiodeploy
from audiodeploy import recipes, runtime
from audiodeploy.program.tts import pieces_within
from audiodeploy.recipes._hifigan_generator import ResBlock2
from audiodeploy.recipes._vits_modules import VitsLatentsToWaveform, VitsTextToDurations
from audiodeploy.recipes.errors import WeightsError
from tests.pipeline import run_lowered
from tests.vits_checkpoint import write_vits_checkpoint


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    from transformers import VitsModel, VitsTokenizer

    directory = write_vits_checkpoint(tmp_path_factory.mktemp("voice"))
    return VitsModel.from_pretrained(directory).eval(), VitsTokenizer.from_pretrained(directory)


def test_encode_wrapper_is_the_text_encoder_and_the_reverse_duration_predictor(voice):
    model, tokenizer = voice
    ids = tokenizer("Say something longer than the attention's window.", return_tensors="pt").input_ids
    mask = torch.ones(1, ids.shape[1], 1)
    torch.manual_seed(3)
    noise = torch.randn(1, 2, ids.shape[1]) * model.noise_scale_duration
    with torch.no_grad():
        encoded = model.text_encoder(input_ids=ids, padding_mask=mask)
        torch.manual_seed(3)
        log_durations = model.duration_predictor(
            encoded.last_hidden_state.transpose(1, 2), mask.transpose(1, 2), None, reverse=True, noise_scale=0.8
        )
        means, log_variances, durations = VitsTextToDurations(model)(ids, noise)
    # The spline runs: some durations' noise lies inside the tail bound, where the flow is not the identity.
    assert (noise.abs() < 5).any()
    torch.testing.assert_close(means, encoded.prior_means, rtol=0, atol=1e-5)
    torch.testing.assert_close(log_variances, encoded.prior_log_variances, rtol=0, atol=1e-5)
    torch.testing.assert_close(durations, log_durations[:, 0], rtol=0, atol=1e-5)


def test_decode_wrapper_is_the_reverse_flow_and_the_hifigan(voice):
    model, _ = voice
    latents = torch.randn(1, 30, model.config.flow_size)
    with torch.no_grad():
        flowed = model.flow(latents.transpose(1, 2), torch.ones(1, 1, 30), None, reverse=True)
        expected = model.decoder(flowed)[:, 0]
        actual = VitsLatentsToWaveform(model)(latents)
    assert actual.shape == (1, 30 * 256)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)


def test_both_wrappers_condition_on_the_speaker_of_a_voice_of_several(tmp_path):
    from transformers import VitsModel

    model = VitsModel.from_pretrained(write_vits_checkpoint(tmp_path, speakers=4)).eval()
    ids = torch.randint(1, model.config.vocab_size, (1, 23))
    mask = torch.ones(1, 1, 23)
    latents = torch.randn(1, 30, model.config.flow_size)
    encode, decode = VitsTextToDurations(model), VitsLatentsToWaveform(model)
    spoken = []
    for speaker in (0, 3):
        speaker_id = torch.tensor([speaker])
        with torch.no_grad():
            embedding = model.embed_speaker(speaker_id).unsqueeze(-1)
            hidden = model.text_encoder(input_ids=ids, padding_mask=mask.transpose(1, 2)).last_hidden_state
            torch.manual_seed(5)
            noise = torch.randn(1, 2, 23) * 0.8
            torch.manual_seed(5)
            log_durations = model.duration_predictor(
                hidden.transpose(1, 2), mask, embedding, reverse=True, noise_scale=0.8
            )
            flowed = model.flow(latents.transpose(1, 2), torch.ones(1, 1, 30), embedding, reverse=True)
            expected = model.decoder(flowed, embedding)[:, 0]
            durations = encode(ids, noise, speaker_id)[2]
            actual = decode(latents, speaker_id)
        torch.testing.assert_close(durations, log_durations[:, 0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)
        spoken.append(actual)
    assert not torch.allclose(spoken[0], spoken[1])  # the speaker changes the voice
    with pytest.raises(TypeError, match="speaker index"):
        decode(latents)


def test_program_speaks_what_eager_vits_model_speaks_for_the_same_seed(tts_model):
    """The shared voice has three speakers: both methods take the speaker's index last."""
    from transformers import VitsModel, VitsTokenizer

    checkpoint = tts_model.parent / "checkpoint"
    model = VitsModel.from_pretrained(checkpoint).eval()
    tokenizer = VitsTokenizer.from_pretrained(checkpoint)
    synthesizer = runtime.load(tts_model)
    assert isinstance(synthesizer, runtime.Synthesizer) and synthesizer.text.speakers == 3
    report = json.loads(tts_model.with_suffix(".json").read_text())["lowering"]
    assert {name: method["delegates"] for name, method in report["methods"].items()} == {"encode": 1, "decode": 1}
    cases = [("Hello World, this is the whole chain!", 555, None), ("The quick brown fox.", 0, 2)]
    for text, seed, speaker in cases:
        torch.manual_seed(seed)
        with torch.no_grad():
            ids = tokenizer(text, return_tensors="pt").input_ids
            # Ours speaks the first speaker when none is given; transformers' would condition on none.
            expected = model(ids, speaker_id=speaker or 0).waveform[0]
        spoken = synthesizer.synthesize(text, runtime.Voice(seed=seed, speaker=speaker))
        assert spoken.samples.shape == expected.shape
        assert float(expected.std()) > 0.05  # speech-like amplitude, not silence
        torch.testing.assert_close(spoken.samples, expected, rtol=0, atol=1e-4)
    with pytest.raises(runtime.TextError, match="speaker 3 is not in this voice, which has speakers 0 to 2"):
        synthesizer.synthesize("Hello.", runtime.Voice(speaker=3))


def test_sentences_stream_to_the_file_one_after_another(tts_model, tmp_path):
    synthesizer = runtime.load(tts_model)
    voice = runtime.Voice(seed=9, speaking_rate=1.2)
    first, second = "A first sentence.", "And the second one?"
    written = synthesizer.synthesize_to_file(f"{first} {second}", tmp_path / "both.wav", voice)
    whole = synthesizer.synthesize(f"{first} {second}", voice).samples.numpy()
    audio, rate = soundfile.read(tmp_path / "both.wav", dtype="float32")
    assert rate == 16_000 and written.samples == audio.size == whole.size
    np.testing.assert_allclose(audio, np.clip(whole, -1, 1), rtol=0, atol=2 / 32768)
    # One noise stream over the sentences: the second sentence differs from the same sentence spoken first.
    alone = synthesizer.synthesize(second, voice).samples.numpy()
    assert not np.array_equal(whole[-alone.size :], alone)


def test_a_sentence_longer_than_encode_takes_is_spoken_in_pieces(tts_model):
    """No punctuation in 140 words (1,399 tokens, 599 a run): three pieces between words, spoken as three sentences
    would be, from one noise stream."""
    synthesizer = runtime.load(tts_model)
    text = synthesizer.text
    long = "word " * 140

    def fits(piece: str) -> bool:
        return text.front_end.token_ids(piece).size <= text.max_tokens

    pieces = list(pieces_within(long, fits))
    assert len(pieces) == 3 and " ".join(pieces) == long.strip()
    voice = runtime.Voice(seed=4)
    spoken = synthesizer.synthesize(long, voice).samples
    np.testing.assert_array_equal(spoken.numpy(), synthesizer.synthesize("\n\n".join(pieces), voice).samples.numpy())


def test_piper_sized_voice_decodes_through_type_2_residual_blocks_in_one_delegate():
    """Piper's medium and low voices: a HiFi-GAN of type "2" blocks, which transformers' `VitsHifiGan` lacks. Only
    ``decode`` holds the decoder (``encode`` is mms-tts's, lowered by the shared voice)."""
    vits = recipes.get("vits")
    medium_built = vits.build("piper-medium")
    # A published size with no published checkpoint: not called a test size.
    assert medium_built.weights_provenance == "synthetic (seed 0) from the 'piper-medium' configuration"
    medium = medium_built.module.decoder
    assert [type(block) for block in medium.resblocks] == [ResBlock2] * 9  # three stages of kernels 3, 5 and 7
    assert [len(block.convs) for block in medium.resblocks] == [2] * 9
    # One length: what a dynamic one adds is the shared voice's (a static lowering takes half the time).
    built = vits.build("tiny-piper", length_range=recipes.LengthRange(0.2, 0.2))
    assert all(isinstance(block, ResBlock2) for block in built.module.decoder.resblocks)
    lowered = audiodeploy.lower(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)
    report = lowered.report.methods["forward"]
    assert (report.delegates, report.ops_outside_delegates, report.not_folded) == (1, {}, ()), str(lowered.report)
    inputs = built.random_inputs(built.input.max_length, seed=1)
    with torch.no_grad():
        expected = built.module(*inputs)
    assert float(expected.std()) > 0.05  # speech-like amplitude, not silence
    torch.testing.assert_close(run_lowered(lowered, inputs), expected, atol=built.atol, rtol=0)


def test_synthetic_voice_builds_with_durations_like_speech():
    built = recipes.get("vits").build(variant="tiny")
    assert built.text_encoder is not None and built.method == "decode"
    assert list(built.methods) == ["encode", "decode"]
    ids, noise = built.text_encoder.example_inputs
    with torch.no_grad():
        log_durations = built.text_encoder.module(ids, noise)[2]
    frames_per_token = float(torch.ceil(torch.exp(log_durations)).mean())
    assert 1.5 < frames_per_token < 10


def test_a_phoneme_voice_reads_its_text_as_its_tokenizer_does_and_one_without_vocabulary_is_refused(tmp_path):
    from transformers import VitsTokenizer

    phonemes = write_vits_checkpoint(tmp_path / "phonemes", phonemize=True)
    text = recipes.get("vits").build(weights=str(phonemes)).text_encoder.text
    assert text.front_end.phonemize and "read as espeak-ng phonemes" in text.front_end.origin
    sentence = "Phonemes, through espeak-ng!"
    expected = VitsTokenizer.from_pretrained(phonemes)(sentence).input_ids
    assert text.front_end.token_ids(sentence).tolist() == expected
    (phonemes / "vocab.json").unlink()
    with pytest.raises(WeightsError, match="no vocab.json"):
        recipes.get("vits").build(weights=str(phonemes))


def test_a_piper_size_with_type_2_blocks_refuses_a_transformers_checkpoint(tmp_path):
    """transformers' `VitsHifiGan` has type "1" blocks only: such a checkpoint is never a piper-medium voice."""
    checkpoint = write_vits_checkpoint(tmp_path / "voice")
    for variant in ("piper-medium", "piper-low", "piper-x-low"):
        with pytest.raises(WeightsError, match=f"variant '{variant}' decodes with type \"2\" .* leave out --variant"):
            recipes.get("vits").build(variant, weights=str(checkpoint))
    assert recipes.get("vits").build("piper-high", weights=str(checkpoint)).weights_provenance.startswith("loaded")
