"""Text to speech without the model: the text front end, the durations' expansion and the noise, in numpy.

A VITS program (the ``vits`` recipe) has two methods, cut where the number of frames starts to depend on the
predicted durations: ``encode`` takes a sentence's token ids and the duration noise and gives the prior's means and
log-variances per token and each token's log-duration; ``decode`` takes the prior latents, one row per frame, and
gives the waveform. Between them, this module does what transformers' `VitsModel.forward` does in torch: round the
durations up, repeat each token's prior for its frames (the monotonic alignment of a hard duration is a repetition)
and draw the latents.

The noise is torch's: `TorchNormal` gives, for a seed, the numbers that ``torch.manual_seed(seed)`` followed by the
same ``torch.randn`` calls gives on a CPU (its mt19937 stream, and each of the two ways torch turns it into normal
numbers), so that a program and eager `VitsModel` given the same seed synthesize the same samples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from audiodeploy.errors import AudiodeployError

from .records import Record

__all__ = [
    "TextError",
    "TextFrontEnd",
    "TextToSpeech",
    "TorchNormal",
    "frame_durations",
    "pieces_within",
    "prior_latents",
    "sentences",
]


class TextError(AudiodeployError, ValueError):
    """A text the program cannot speak: it is empty or nothing of it is in the vocabulary, or (given to `encode`
    itself) a sentence is too long."""


@dataclass(frozen=True, kw_only=True)
class TextFrontEnd(Record):
    """How text becomes token ids, as transformers' `VitsTokenizer` does it: characters (MMS-TTS), or phonemes
    (``phonemize``: the VITS voices trained on espeak's IPA, such as LJSpeech's and VCTK's)."""

    characters: tuple[str, ...]
    """The vocabulary by token id: one character (or a longer token the text may spell out) per id."""
    lowercase: bool
    """Lowercase everything but the vocabulary's own tokens (`VitsTokenizer`'s ``normalize``), and drop what is not
    in the vocabulary."""
    add_blank: bool
    """Put token 0 between every two tokens and at both ends (the checkpoints were trained so)."""
    origin: str
    """Where the vocabulary comes from: a checkpoint's vocab.json, or the stand-in of synthetic weights."""
    phonemize: bool = False
    """Read the text as phonemes: after lowercasing, espeak-ng's IPA with stress marks and punctuation for American
    English (what `VitsTokenizer` asks the `phonemizer` package for, whatever the voice's language), every
    character a token; nothing is dropped. Synthesis then needs espeak-ng and `phonemizer` installed."""

    def __post_init__(self) -> None:
        if not self.characters or len(set(self.characters)) != len(self.characters):
            raise ValueError("field 'characters' should hold distinct tokens, at least one")

    def normalized(self, text: str) -> str:
        """`text` as the model reads it: lowercased (but the vocabulary's own tokens), then its phonemes, or only
        the characters in the vocabulary, stripped."""
        if self.phonemize:
            return _phonemes(self._lowercased(text) if self.lowercase else text)
        if not self.lowercase:
            return text
        known = set(self.characters)
        return "".join(character for character in self._lowercased(text) if character in known).strip()

    def _lowercased(self, text: str) -> str:
        """`text` lowercased but where it spells one of the vocabulary's tokens (the longest first)."""
        tokens = sorted(self.characters, key=len, reverse=True)
        kept: list[str] = []
        position = 0
        while position < len(text):
            token = next((t for t in tokens if text.startswith(t, position)), None)
            if token is None:
                kept.append(text[position].lower())
                position += 1
            else:
                kept.append(token)
                position += len(token)
        return "".join(kept)

    def token_ids(self, text: str) -> np.ndarray:
        """The ``(tokens,)`` int64 ids of `text`; `TextError` if nothing of it is in the vocabulary."""
        ids = {token: index for index, token in enumerate(self.characters)}
        normalized = self.normalized(text)
        # As VitsTokenizer: a character outside the vocabulary (without lowercase, or a phoneme it lacks) is id 0.
        tokens = [ids.get(character, 0) for character in normalized]
        if not tokens:
            raise TextError(
                f"nothing in {_shown(text)} is in the voice's vocabulary ({self.origin}): give text in its language"
            )
        if self.add_blank:
            interspersed = [0] * (2 * len(tokens) + 1)
            interspersed[1::2] = tokens
            tokens = interspersed
        return np.asarray(tokens, dtype=np.int64)


def _phonemes(text: str) -> str:
    """`text` in espeak-ng's IPA as `VitsTokenizer` asks `phonemizer` for it, runs of white space made one space."""
    try:
        import phonemizer
    except ImportError:
        raise TextError(
            "this voice reads phonemes, and the phonemizer package is not installed: pip install phonemizer, and "
            "install espeak-ng (apt install espeak-ng)"
        ) from None
    try:
        phonemes = phonemizer.phonemize(
            text, language="en-us", backend="espeak", strip=True, preserve_punctuation=True, with_stress=True
        )
    except RuntimeError as error:  # phonemizer's words for a missing espeak library
        raise TextError(f"this voice reads phonemes, and espeak-ng cannot run ({error}): install espeak-ng") from None
    return re.sub(r"\s+", " ", str(phonemes))


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


@dataclass(frozen=True, kw_only=True)
class TextToSpeech(Record):
    """A VITS program's ``encode`` method and the host's part between its two methods (the sidecar's
    ``model.text``)."""

    front_end: TextFrontEnd
    min_tokens: int
    max_tokens: int
    """The token counts ``encode`` takes; the runtime speaks a longer sentence in pieces (`pieces_within`)."""
    flow_size: int
    """Channels of the prior and of the latents ``decode`` takes."""
    noise_scale: float
    noise_scale_duration: float
    speaking_rate: float
    """The checkpoint's defaults (transformers' `VitsConfig`): the standard deviation of the latents' and of the
    durations' noise, and the speed (durations are divided by it)."""
    speakers: int = 1
    """The voices the checkpoint holds. With more than one, both methods take the speaker's index (int64 ``[1]``,
    from 0) as their last input."""
    max_abs_diff_vs_eager: float | None = None
    """``encode``'s largest absolute difference from eager on the example tokens; None where nothing was compared."""

    def __post_init__(self) -> None:
        if self.speakers < 1:
            raise ValueError("field 'speakers' should be at least 1")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise ValueError("fields 'min_tokens' and 'max_tokens' should give a range of at least one token")
        if self.flow_size < 1:
            raise ValueError("field 'flow_size' should be at least 1")
        if self.speaking_rate <= 0 or self.noise_scale < 0 or self.noise_scale_duration < 0:
            raise ValueError("a positive 'speaking_rate' and noise scales of at least 0, please")

    @property
    def speaker_inputs(self) -> int:
        """How many speaker inputs each method takes after its own: 1 for a voice of several speakers, else 0."""
        return int(self.speakers > 1)


class TorchNormal:
    """Standard normal numbers as torch draws them on a CPU after ``torch.manual_seed(seed)``, in numpy.

    torch's CPU generator is mt19937 seeded as numpy's legacy `RandomState` seeds it, so its 32-bit outputs are
    the same. A contiguous float32 ``torch.randn`` of at least 16 numbers (`contiguous`) takes 24-bit uniforms, one
    per number, and turns each block of 16 into normals by Box-Muller (the last block, when the count is not a
    multiple of 16, is redrawn from 16 new uniforms). Anything else (fewer numbers, or a strided tensor such as
    ``randn_like`` of a transposed one) takes two 53-bit uniforms per pair of numbers, in memory order, and keeps
    the pair's second number for the next such call. The arithmetic is float64 here, where torch's fast path
    computes in float32: the numbers agree to a few units in the last place of float32.
    """

    def __init__(self, seed: int) -> None:
        if not 0 <= seed < 2**32:
            raise ValueError(f"seed {seed} is outside 0 .. 2**32 - 1")
        self._stream = np.random.RandomState(seed)
        self._cached: float | None = None

    def _words(self, count: int) -> np.ndarray:
        return self._stream.randint(0, 2**32, size=count, dtype=np.uint64)

    def _float_uniforms(self, count: int) -> np.ndarray:
        """`count` uniforms in [0, 1) of 24 bits, as torch draws them for float32."""
        return (self._words(count) & 0xFFFFFF).astype(np.float64) * 2.0**-24

    def randn(self, count: int, *, contiguous: bool = True) -> np.ndarray:
        """The next `count` numbers of ``torch.randn`` (`contiguous`) or ``torch.randn_like`` of a strided tensor,
        float32, in memory order."""
        if contiguous and count >= 16:
            return self._blocks(count)
        return self._pairs(count)

    def _blocks(self, count: int) -> np.ndarray:
        uniforms = self._float_uniforms(count)
        values = np.empty(count, dtype=np.float64)
        whole = count // 16 * 16
        values[:whole] = _box_muller_blocks(uniforms[:whole])
        if count % 16:
            values[count - 16 :] = _box_muller_blocks(self._float_uniforms(16))
        return values.astype(np.float32)

    def _pairs(self, count: int) -> np.ndarray:
        values: list[np.ndarray] = []
        if count and self._cached is not None:
            values.append(np.array([self._cached]))
            count -= 1
            self._cached = None
        pairs = math.ceil(count / 2)
        # Two 53-bit uniforms per pair, each from two words (high word first).
        words = self._words(4 * pairs).reshape(pairs, 2, 2)
        bits = ((words[..., 0] << np.uint64(32)) | words[..., 1]) & np.uint64(2**53 - 1)
        u1, u2 = (bits.astype(np.float64) * 2.0**-53).T
        radius = np.sqrt(-2.0 * np.log1p(-u2))
        theta = 2.0 * np.pi * u1
        drawn = np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=1).reshape(-1)
        if count % 2:
            self._cached = float(drawn[count])
        values.append(drawn[:count])
        return np.concatenate(values).astype(np.float32)


def _box_muller_blocks(uniforms: np.ndarray) -> np.ndarray:
    blocks = uniforms.reshape(-1, 2, 8)
    radius = np.sqrt(-2.0 * np.log(1.0 - blocks[:, 0]))
    theta = 2.0 * np.pi * blocks[:, 1]
    return np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=1).reshape(-1)


def frame_durations(log_durations: np.ndarray, speaking_rate: float) -> np.ndarray:
    """Frames per token, ``(tokens,)`` int64: ``ceil(exp(log_duration) / speaking_rate)``, as `VitsModel` rounds
    them (in float32)."""
    length_scale = np.float32(1.0 / speaking_rate)
    durations = np.ceil(np.exp(log_durations.astype(np.float32)) * length_scale)
    return durations.astype(np.int64)


def prior_latents(
    means: np.ndarray, log_variances: np.ndarray, durations: np.ndarray, noise: np.ndarray, noise_scale: float
) -> np.ndarray:
    """The latents ``decode`` takes, ``(1, frames, flow_size)`` float32: each token's prior repeated for its
    frames, plus `noise` ``(frames, flow_size)`` scaled by the prior's deviation and `noise_scale`."""
    expanded_means = np.repeat(means.astype(np.float32), durations, axis=0)
    expanded_log_variances = np.repeat(log_variances.astype(np.float32), durations, axis=0)
    scale = np.exp(expanded_log_variances) * np.float32(noise_scale)
    return (expanded_means + noise.astype(np.float32) * scale)[None].astype(np.float32)


def sentences(text: str) -> Iterator[str]:
    """`text` cut after each sentence's end (``.``, ``!``, ``?``, ``;`` and their full-width forms) and at blank
    lines, each piece stripped; empty pieces are skipped."""
    piece: list[str] = []
    for index, character in enumerate(text):
        piece.append(character)
        following = text[index + 1] if index + 1 < len(text) else " "
        ends_sentence = character in ".!?;。！？；" and following.isspace()
        if ends_sentence or (character == "\n" and following == "\n"):
            sentence = "".join(piece).strip()
            if sentence:
                yield sentence
            piece = []
    sentence = "".join(piece).strip()
    if sentence:
        yield sentence


# Where a sentence too long for the program is cut first: after a clause (a comma, colon, dash or their full-width
# forms, before a space), then before each space, then between characters.
_PIECE_BOUNDARIES = (
    re.compile(r"(?<=[,:\u2013\u2014\u3001\uff0c\uff1a])(?=\s)"),
    re.compile(r"(?=\s)"),
    re.compile(r"(?<=.)(?=.)", re.S),
)


def pieces_within(sentence: str, fits: Callable[[str], bool]) -> Iterator[str]:
    """`sentence` whole when `fits` takes it; else the longest runs of its clauses that `fits` takes, a clause too long
    alone in runs of its words, and a word too long alone in runs of its characters. Every character is in one piece,
    in order; each piece is stripped, and empty ones are skipped."""
    if fits(sentence):
        yield sentence
        return
    yield from _runs_within(sentence, fits, 0)


def _runs_within(text: str, fits: Callable[[str], bool], level: int) -> Iterator[str]:
    run = ""
    for unit in _PIECE_BOUNDARIES[level].split(text):
        if fits((run + unit).strip()):
            run += unit
            continue
        if run.strip():
            yield run.strip()
        run = ""
        if fits(unit.strip()) or level + 1 == len(_PIECE_BOUNDARIES):  # a character too long alone: its own piece
            run = unit
        else:
            yield from _runs_within(unit, fits, level + 1)
    if run.strip():
        yield run.strip()
