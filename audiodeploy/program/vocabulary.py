"""CTC vocabularies and greedy decoding: the labels a speech recognizer's logits index, and how to read them."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._fields import str_field, str_tuple_field

if TYPE_CHECKING:
    import torch

# The character vocabulary of the published English CTC checkpoints (vocab.json of
# facebook/wav2vec2-base-960h, shared by wav2vec2-large-960h, wav2vec2-large-960h-lv60-self and
# hubert-large-ls960-ft): blank first, then sentence markers, unknown, the word delimiter and letters by
# frequency.
STANDARD_ENGLISH_TOKENS: tuple[str, ...] = (
    "<pad>", "<s>", "</s>", "<unk>", "|",
    "E", "T", "A", "O", "N", "I", "H", "S", "R", "D", "L", "U", "M",
    "W", "C", "F", "G", "Y", "P", "B", "V", "K", "'", "X", "J", "Q", "Z",
)  # fmt: skip

# torchaudio's English ASR bundles (WAV2VEC2_ASR_*, HUBERT_ASR_*) have 29 outputs: the blank "-" followed by
# the labels of `torchaudio.pipelines._wav2vec2.utils._get_en_labels()`, in the same letter order as above.
TORCHAUDIO_ENGLISH_TOKENS: tuple[str, ...] = ("-",) + STANDARD_ENGLISH_TOKENS[4:]


@dataclass(frozen=True)
class CtcVocabulary:
    """Output labels of a CTC head, in logit order, and how to turn them into text.

    `blank` is the CTC blank (transformers' pad token); `word_delimiter` becomes a space; `special` tokens
    (sentence markers, unknown) are dropped from the text after repeats are merged: like any emitted label,
    a special token between two equal letters keeps them apart (transformers' `skip_special_tokens=True`
    drops it before merging and would join them). `origin` says where the vocabulary comes from.
    """

    tokens: tuple[str, ...]
    blank: str
    word_delimiter: str
    special: tuple[str, ...]
    origin: str

    def __post_init__(self) -> None:
        if self.blank not in self.tokens:
            raise ValueError(f"blank token {self.blank!r} is not in the vocabulary")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def blank_id(self) -> int:
        return self.tokens.index(self.blank)

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Greedy CTC decoding of per-frame label ids: merge repeats, drop blanks and special tokens."""
        skipped = {self.blank, *self.special}
        pieces: list[str] = []
        for token_id, _ in itertools.groupby(ids):
            token = self.tokens[token_id]
            if token in skipped:
                continue
            pieces.append(" " if token == self.word_delimiter else token)
        # Consecutive delimiters and delimiters at the edges would leave stray spaces.
        return " ".join("".join(pieces).split())

    def decode(self, logits: torch.Tensor) -> str:
        """Greedy CTC decoding of logits shaped `(1, frames, vocabulary)` or `(frames, vocabulary)`."""
        return self.decode_ids(self.frame_labels(logits))

    def frame_labels(self, logits: torch.Tensor) -> list[int]:
        """The best label of each frame of logits shaped `(1, frames, vocabulary)` or `(frames, vocabulary)`."""
        if logits.dim() == 3:
            if logits.shape[0] != 1:
                raise ValueError(f"expected a batch of one, got logits of shape {tuple(logits.shape)}")
            logits = logits[0]
        if logits.dim() != 2 or logits.shape[-1] != len(self.tokens):
            raise ValueError(
                f"logits of shape {tuple(logits.shape)} do not match a vocabulary of {len(self.tokens)} tokens"
            )
        return logits.argmax(dim=-1).tolist()

    def to_dict(self) -> dict[str, object]:
        return {
            "tokens": list(self.tokens),
            "blank": self.blank,
            "word_delimiter": self.word_delimiter,
            "special": list(self.special),
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CtcVocabulary:
        """The vocabulary `to_dict` wrote; raises ValueError for a malformed dictionary."""
        return cls(
            tokens=str_tuple_field(data, "tokens"),
            blank=str_field(data, "blank"),
            word_delimiter=str_field(data, "word_delimiter"),
            special=str_tuple_field(data, "special"),
            origin=str_field(data, "origin"),
        )


STANDARD_ENGLISH = CtcVocabulary(
    tokens=STANDARD_ENGLISH_TOKENS,
    blank="<pad>",
    word_delimiter="|",
    special=("<s>", "</s>", "<unk>"),
    origin="standard English CTC characters of facebook/wav2vec2-base-960h",
)

TORCHAUDIO_ENGLISH = CtcVocabulary(
    tokens=TORCHAUDIO_ENGLISH_TOKENS,
    blank="-",
    word_delimiter="|",
    special=(),
    origin="English labels of torchaudio's ASR bundles",
)


def greedy_decode(logits: torch.Tensor, vocabulary: CtcVocabulary = STANDARD_ENGLISH) -> str:
    """Greedy CTC decoding of `(1, frames, vocabulary)` logits into text."""
    return vocabulary.decode(logits)
