"""CTC vocabularies and greedy decoding."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Wav2Vec2CTCTokenizer

from audiodeploy.program.vocabulary import STANDARD_ENGLISH, TORCHAUDIO_ENGLISH, CtcVocabulary, greedy_decode


def logits_for(ids: list[int], vocabulary_size: int = 32) -> torch.Tensor:
    """Logits `(1, frames, vocabulary)` whose argmax per frame is `ids`."""
    logits = torch.zeros(1, len(ids), vocabulary_size)
    logits[0, torch.arange(len(ids)), torch.tensor(ids)] = 5.0
    return logits


def ids_of(text: str, vocabulary: CtcVocabulary = STANDARD_ENGLISH) -> list[int]:
    return [vocabulary.tokens.index("|" if character == " " else character) for character in text]


def test_standard_vocabulary_is_the_published_one():
    published = "<pad> <s> </s> <unk> | E T A O N I H S R D L U M W C F G Y P B V K ' X J Q Z"
    assert STANDARD_ENGLISH.tokens == tuple(published.split(" "))
    assert STANDARD_ENGLISH.blank_id == 0
    assert len(TORCHAUDIO_ENGLISH) == 29 and TORCHAUDIO_ENGLISH.blank_id == 0


def test_greedy_decode_merges_repeats_and_drops_blanks():
    blank = STANDARD_ENGLISH.blank_id
    h, e, letter_l, o = ids_of("HELO")
    # "HH E _ L L _ L O" → HELLO: the blank separates the two L's, repeats merge.
    ids = [h, h, e, blank, letter_l, letter_l, blank, letter_l, o]
    assert greedy_decode(logits_for(ids)) == "HELLO"


def test_word_delimiters_become_single_spaces_and_edges_are_trimmed():
    delimiter = STANDARD_ENGLISH.tokens.index("|")
    ids = [delimiter, *ids_of("HI"), delimiter, 0, delimiter, *ids_of("YOU"), delimiter]
    assert greedy_decode(logits_for(ids)) == "HI YOU"


def test_sentence_markers_and_unknown_are_dropped():
    ids = [1, *ids_of("OK"), 3, 2]
    assert greedy_decode(logits_for(ids)) == "OK"


def test_all_blank_decodes_to_empty_text():
    assert greedy_decode(logits_for([0, 0, 0])) == ""


def test_decode_agrees_with_the_transformers_tokenizer(tmp_path):
    vocab_file = tmp_path / "vocab.json"
    vocab_file.write_text(json.dumps({token: index for index, token in enumerate(STANDARD_ENGLISH.tokens)}))
    tokenizer = Wav2Vec2CTCTokenizer(str(vocab_file))
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        ids = torch.randint(0, 32, (40,), generator=generator).tolist()
        # Special tokens are dropped after repeats merge, as for any emitted label; transformers'
        # skip_special_tokens=True would drop them first and merge the letters around them.
        expected = tokenizer.decode(ids)
        for special in STANDARD_ENGLISH.special:
            expected = expected.replace(special, "")
        assert STANDARD_ENGLISH.decode_ids(ids) == " ".join(expected.split())


def test_a_special_token_separates_repeated_letters_like_any_label():
    z, unk = STANDARD_ENGLISH.tokens.index("Z"), STANDARD_ENGLISH.tokens.index("<unk>")
    assert STANDARD_ENGLISH.decode_ids([z, unk, z]) == "ZZ"


def test_torchaudio_labels_decode_with_their_own_blank():
    ids = [0, *ids_of("CAT", TORCHAUDIO_ENGLISH), 0, 1, *ids_of("DOG", TORCHAUDIO_ENGLISH)]
    assert TORCHAUDIO_ENGLISH.decode(logits_for(ids, 29)) == "CAT DOG"


def test_logits_of_another_size_are_refused():
    with pytest.raises(ValueError, match="vocabulary of 32 tokens"):
        STANDARD_ENGLISH.decode(torch.zeros(1, 4, 29))


def test_vocabulary_round_trips_through_a_dictionary():
    assert CtcVocabulary.from_dict(json.loads(json.dumps(STANDARD_ENGLISH.to_dict()))) == STANDARD_ENGLISH
