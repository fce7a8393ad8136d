"""The host's part of text to speech, against what transformers and torch do: the front end against
`VitsTokenizer`, the noise against ``torch.randn``, the durations and the expanded prior against `VitsModel`'s."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from audiodeploy.program.tts import (
    TextError,
    TextFrontEnd,
    TextToSpeech,
    TorchNormal,
    frame_durations,
    pieces_within,
    prior_latents,
    sentences,
)
from tests.vits_checkpoint import CHARACTERS, PHONEMES, text_to_speech


@pytest.mark.parametrize("seed", [0, 555, 2**32 - 1])
@pytest.mark.parametrize("count", [1, 5, 15, 16, 17, 46, 100])
def test_torch_normal_draws_what_torch_randn_draws(seed, count):
    torch.manual_seed(seed)
    expected = torch.randn(count).numpy()
    # torch's fast path computes in float32, this one in float64: a few units in float32's last place.
    np.testing.assert_allclose(TorchNormal(seed).randn(count), expected, rtol=0, atol=2e-6)


def test_torch_normal_follows_a_sequence_of_calls_through_both_paths():
    """VitsModel's two draws: the duration noise ``randn(1, 2, n)``, then ``randn_like`` of the transposed prior
    (strided: the pair path, whose leftover number the next such call takes first)."""
    torch.manual_seed(7)
    durations = torch.randn(1, 2, 3)  # 6 numbers: the pair path
    strided = torch.randn_like(torch.zeros(1, 5, 3).transpose(1, 2))  # 15 numbers, strided
    after = torch.randn(1, 1, 3)  # takes the leftover of the strided draw first
    blocks = torch.randn(1, 2, 23)  # 46 numbers, contiguous: the block path
    normal = TorchNormal(7)
    np.testing.assert_array_equal(normal.randn(6), durations.numpy().ravel())
    np.testing.assert_array_equal(normal.randn(15, contiguous=False).reshape(5, 3).T, strided.numpy()[0])
    np.testing.assert_array_equal(normal.randn(3), after.numpy().ravel())
    np.testing.assert_allclose(normal.randn(46), blocks.numpy().ravel(), rtol=0, atol=2e-6)


def test_torch_normal_refuses_a_seed_torch_would_truncate():
    with pytest.raises(ValueError, match="outside"):
        TorchNormal(2**32)


def vits_tokenizer(directory, vocabulary: tuple[str, ...], phonemize: bool):
    import json

    from transformers import VitsTokenizer

    vocab = directory / "vocab.json"
    vocab.write_text(json.dumps({character: index for index, character in enumerate(vocabulary)}))
    return VitsTokenizer(str(vocab), language="eng", add_blank=True, normalize=True, phonemize=phonemize)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return vits_tokenizer(tmp_path_factory.mktemp("vocab"), CHARACTERS, phonemize=False)


@pytest.fixture(scope="module")
def phoneme_tokenizer(tmp_path_factory):
    return vits_tokenizer(tmp_path_factory.mktemp("phonemes"), PHONEMES, phonemize=True)


FRONT_END = TextFrontEnd(characters=CHARACTERS, lowercase=True, add_blank=True, origin="the test's vocab.json")
PHONEME_FRONT_END = TextFrontEnd(
    characters=PHONEMES, lowercase=True, add_blank=True, origin="the test's vocab.json", phonemize=True
)


@pytest.mark.parametrize(
    "text",
    ["Hello World!", "  The quick, brown fox -- jumps.  ", "It's 2024; don't panic", "a", "Ünïcödé ignored"],
)
def test_front_end_gives_the_ids_vits_tokenizer_gives(tokenizer, text):
    assert FRONT_END.token_ids(text).tolist() == tokenizer(text).input_ids


@pytest.mark.parametrize(
    "text",
    [
        "Hello World, this is the whole chain!",
        "  The quick,   brown fox -- jumps.  ",
        "I read 42 books; Dr. Smith's cat — well…",
        "ÜBER café naïve?",
    ],
)
def test_phoneme_front_end_gives_the_ids_vits_tokenizer_gives_through_espeak(phoneme_tokenizer, text):
    ids = PHONEME_FRONT_END.token_ids(text)
    assert ids.tolist() == phoneme_tokenizer(text).input_ids
    assert {"ˈ", "ə"} & set(PHONEME_FRONT_END.normalized(text))  # IPA with stress marks, not the letters


def test_phoneme_front_end_without_phonemizer_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "phonemizer", None)  # as if not installed: its import raises ImportError
    with pytest.raises(TextError, match="reads phonemes, and the phonemizer package is not installed: pip install"):
        PHONEME_FRONT_END.token_ids("Hello.")


def test_front_end_refuses_text_with_nothing_it_can_say():
    with pytest.raises(TextError, match="nothing in '!!!' is in the voice's vocabulary"):
        FRONT_END.token_ids("!!!")


def test_durations_and_the_expanded_prior_are_vits_models():
    """`VitsModel.forward`'s expansion, by its own torch code: ceil of the scaled durations, a one-hot alignment
    matmul, and the prior's noise."""
    rng = np.random.default_rng(0)
    tokens, channels, rate, scale = 7, 4, 1.3, 0.667
    log_durations = rng.normal(0.5, 1.0, tokens).astype(np.float32)
    means = rng.normal(size=(tokens, channels)).astype(np.float32)
    log_variances = rng.normal(scale=0.3, size=(tokens, channels)).astype(np.float32)

    duration = torch.ceil(torch.exp(torch.from_numpy(log_durations)) * (1.0 / rate))
    frames = int(duration.sum())
    cumulative = torch.cumsum(duration, 0)
    positions = torch.arange(frames, dtype=torch.float32)
    valid = (positions[None, :] < cumulative[:, None]).float()
    alignment = valid - torch.nn.functional.pad(valid, [0, 0, 1, 0])[:-1]  # [tokens, frames]
    noise = rng.normal(size=(frames, channels)).astype(np.float32)
    expected_means = alignment.T @ torch.from_numpy(means)
    expected_log_variances = alignment.T @ torch.from_numpy(log_variances)
    expected = expected_means + torch.from_numpy(noise) * torch.exp(expected_log_variances) * scale

    durations = frame_durations(log_durations, rate)
    assert durations.tolist() == duration.long().tolist()
    latents = prior_latents(means, log_variances, durations, noise, scale)
    assert latents.shape == (1, frames, channels)
    np.testing.assert_allclose(latents[0], expected.numpy(), rtol=0, atol=1e-6)


def test_sentences_are_cut_after_their_end_and_at_blank_lines():
    text = "One. Two! Three? 3.5 stays whole; four\n\nfive\nsix"
    assert list(sentences(text)) == [
        "One.",
        "Two!",
        "Three?",
        "3.5 stays whole;",
        "four",
        "five\nsix",
    ]
    assert list(sentences("  \n ")) == []


def test_a_sentence_too_long_is_cut_after_clauses_then_between_words_then_characters():
    def fits(text: str) -> bool:
        return len(text) <= 16

    assert list(pieces_within("fits whole, as is", lambda text: True)) == ["fits whole, as is"]
    sentence = "one two, three four five six, seven: eight nine ten eleven twelve"
    pieces = list(pieces_within(sentence, fits))
    # a clause cut into words ends a piece: the next starts at the clause after it
    assert pieces == ["one two,", "three four five", "six,", "seven:", "eight nine ten", "eleven twelve"]
    assert " ".join(pieces) == sentence and all(fits(piece) for piece in pieces)
    word = "pneumonoultramicroscopicsilicovolcanoconiosis"
    assert list(pieces_within(f"a {word} b", fits)) == ["a", word[:16], word[16:32], word[32:], "b"]


def test_text_to_speech_record_round_trips_and_checks_itself():
    text = text_to_speech(CHARACTERS, max_tokens=599, max_abs_diff_vs_eager=1e-6)
    assert TextToSpeech.from_dict(text.to_dict()) == text
    phonemes = TextToSpeech.from_dict({**text.to_dict(), "front_end": PHONEME_FRONT_END.to_dict()})
    assert phonemes.front_end.phonemize and TextToSpeech.from_dict(phonemes.to_dict()) == phonemes
    with pytest.raises(ValueError, match="min_tokens"):
        TextToSpeech.from_dict({**text.to_dict(), "min_tokens": 0})
