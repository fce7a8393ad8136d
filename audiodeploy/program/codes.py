"""The codes of a codec that runs on its own chunks (EnCodec at 48 kHz), in memory and on disk, and the linear
overlap-add that joins the chunks' decoded audio.

Such a codec encodes each chunk of audio on its own, normalized by the chunk's loudness: its codes are
`(chunks, codebooks, frames)` int64 with one float32 scale per chunk (transformers' ``audio_codes`` less the batch
axis, and ``audio_scales``). A file of them is a ``.npz`` holding ``codes``, ``scales`` (for a codec that
normalizes) and ``samples``, the length of the audio they stand for: a plain ``.npy`` has no room for the scales.
Nothing in the file is unpickled.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audiodeploy._files import atomic_write_bytes, display

from .audio import AudioInputError
from .description import CodecDecoder

CHUNKED_CODES_SUFFIX = ".npz"


@dataclass(frozen=True)
class ChunkedCodes:
    """The codes of audio encoded chunk by chunk, each chunk `stride` samples after the one before."""

    codes: np.ndarray
    """`(chunks, codebooks, frames)` int64 codebook indices, `frames` per chunk."""
    scales: np.ndarray | None
    """`(chunks,)` float32: each chunk's loudness, which decoding multiplies back; None for a codec that does not
    normalize its chunks."""
    samples: int
    """How many samples (of each channel) of audio the codes stand for: decoding gives exactly these."""

    @property
    def chunks(self) -> int:
        return int(self.codes.shape[0])

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the codes as a ``.npz`` (``codes``, ``scales`` when there are any, ``samples``), atomically."""
        samples = np.array(self.samples, dtype=np.int64)
        buffer = io.BytesIO()
        if self.scales is None:
            np.savez(buffer, codes=self.codes, samples=samples)
        else:
            np.savez(buffer, codes=self.codes, scales=self.scales, samples=samples)
        return atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ChunkedCodes:
        """The codes a `save` wrote; `AudioInputError` (one line) for a file that is not such a ``.npz``. Their shape
        and values are checked against a program by `check`."""
        shown = display(path)
        remedy = "give the .npz that this codec's encode wrote"
        if not Path(path).is_file():
            what = "no such file" if not Path(path).exists() else "not a regular file"
            raise AudioInputError(f"{shown}: {what}; {remedy}")
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {name: archive[name] for name in ("codes", "scales", "samples") if name in archive.files}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
            # numpy takes a file that is no archive for a pickle, which it refuses to load: say what it is not.
            reason = "not a .npz archive" if "pickle" in str(error) else " ".join(str(error).split())
            raise AudioInputError(f"{shown}: not a readable .npz of codes ({reason}); {remedy}") from None
        if "codes" not in arrays or "samples" not in arrays:
            raise AudioInputError(f"{shown}: a .npz without 'codes' and 'samples'; {remedy}")
        codes, samples, scales = arrays["codes"], arrays["samples"], arrays.get("scales")
        if samples.shape != () or samples.dtype.kind not in "iu":
            raise AudioInputError(f"{shown}: 'samples' is not one integer; {remedy}")
        return cls(codes, scales, int(samples))

    def check(self, decoder: CodecDecoder, origin: str) -> None:
        """Raise `AudioInputError` unless these codes fit the chunked codec whose ``decode`` is `decoder`: its
        codebooks and their entries, its frames a chunk, its chunks' stride, scaled or not."""
        assert decoder.chunks is not None  # a chunked codec's
        codebooks, frames, codebook_size = decoder.codebooks, decoder.input.max_length, decoder.codebook_size
        stride, scaled = decoder.chunks.stride, decoder.chunks.scaled
        remedy = "give the codes this codec's encode gave"
        codes, scales = self.codes, self.scales
        if codes.ndim != 3 or codes.shape[1:] != (codebooks, frames) or codes.shape[0] == 0:
            raise AudioInputError(
                f"{origin}: codes of shape {tuple(codes.shape)}; this codec takes (chunks, {codebooks}, {frames}): "
                f"{remedy}"
            )
        if codes.dtype.kind not in "iu":
            raise AudioInputError(f"{origin}: the codes are {codes.dtype} values; {remedy}")
        outside = (codes < 0) | (codes >= codebook_size)
        if outside.any():
            chunk = int(np.argmax(outside.reshape(codes.shape[0], -1).any(axis=1)))
            raise AudioInputError(
                f"{origin}: a code outside the codebooks' {codebook_size} entries (the first in chunk {chunk}); give "
                f"indices from 0 to {codebook_size - 1}, as its encode gives them"
            )
        if scaled != (scales is not None):
            has = "has no scales" if scales is None else "has scales"
            raise AudioInputError(
                f"{origin}: the file {has}, which this codec's chunks {'need' if scaled else 'do not take'}; {remedy}"
            )
        if scales is not None and (
            scales.shape != (codes.shape[0],)
            or scales.dtype.kind != "f"
            or not (np.isfinite(scales).all() and (scales >= 0).all())
        ):
            raise AudioInputError(
                f"{origin}: the scales are not one finite, non-negative number per chunk ({codes.shape[0]}); {remedy}"
            )
        if not (codes.shape[0] - 1) * stride < self.samples <= codes.shape[0] * stride:
            raise AudioInputError(
                f"{origin}: {codes.shape[0]} chunks do not stand for {self.samples} samples (chunks start every "
                f"{stride}); {remedy}"
            )


class LinearOverlapAdd:
    """Chunks of `length` samples, each `stride` after the one before, joined with linear fades: each chunk is
    weighted by a triangle that peaks at its middle, and each sample divided by the weights that cover it
    (transformers' `EncodecModel._linear_overlap_add`, in the same order of additions), streamed: `add` gives the
    samples no later chunk can change."""

    def __init__(self, length: int, stride: int, channels: int) -> None:
        import torch

        # torch's float32 linspace, as transformers computes the weight.
        self.weight = (0.5 - (torch.linspace(0, 1, length + 2)[1:-1] - 0.5).abs()).numpy()
        self.stride = stride
        self._sum = np.zeros((channels, length), dtype=np.float32)
        self._weights = np.zeros(length, dtype=np.float32)

    def add(self, chunk: np.ndarray, last: bool = False) -> np.ndarray:
        """Add the next chunk `(channels, length)`; the samples now final: `stride` of them, or every remaining one
        after the `last` chunk."""
        self._sum += self.weight * chunk
        self._weights += self.weight
        done = self._sum.shape[1] if last else self.stride
        final = self._sum[:, :done] / self._weights[:done]
        self._sum = np.concatenate([self._sum[:, done:], np.zeros_like(self._sum[:, :done])], axis=1)
        self._weights = np.concatenate([self._weights[done:], np.zeros_like(self._weights[:done])])
        return final
