"""The codes of a codec that runs on its own chunks: a .npz written and read back, and the linear overlap-add that
joins its decoded chunks, against transformers' own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from audiodeploy.program.audio import AudioInputError
from audiodeploy.program.codes import ChunkedCodes, LinearOverlapAdd


@pytest.mark.parametrize("length, stride", [(100, 99), (100, 60), (100, 30), (64, 64)])
def test_the_streamed_overlap_add_is_transformers_own(length, stride):
    """Chunks overlapping by 1%, by 40%, by more than half (three cover some samples) and not at all: each step's
    samples are transformers' `_linear_overlap_add` of all the chunks, in order, and nothing is left over."""
    from transformers import EncodecModel

    chunks = [torch.randn(2, length, generator=torch.Generator().manual_seed(seed)) for seed in range(5)]
    expected = EncodecModel._linear_overlap_add(chunks, stride)
    joined = LinearOverlapAdd(length, stride, channels=2)
    pieces = [joined.add(chunk.numpy(), last=index == len(chunks) - 1) for index, chunk in enumerate(chunks)]
    assert [piece.shape[1] for piece in pieces] == [stride] * 4 + [length]
    assert np.array_equal(np.concatenate(pieces, axis=1), expected.numpy())


def test_codes_round_trip_through_a_npz(tmp_path):
    codes = ChunkedCodes(np.arange(24, dtype=np.int64).reshape(2, 3, 4), np.array([0.5, 0.25], np.float32), 7)
    path = codes.save(tmp_path / "codes.npz")
    loaded = ChunkedCodes.load(path)
    assert np.array_equal(loaded.codes, codes.codes) and loaded.samples == 7
    assert loaded.scales is not None and np.array_equal(loaded.scales, codes.scales)
    unscaled = ChunkedCodes.load(ChunkedCodes(codes.codes, None, 7).save(tmp_path / "plain.npz"))
    assert unscaled.scales is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npz", "plain.npz"]  # no temporary left


def test_a_npz_of_python_objects_is_refused_unread(tmp_path):
    np.savez(tmp_path / "objects.npz", codes=np.array([{"a": 1}], dtype=object), samples=np.array(3))
    with pytest.raises(AudioInputError, match="objects.npz: not a readable .npz of codes"):
        ChunkedCodes.load(tmp_path / "objects.npz")
    with pytest.raises(AudioInputError, match="missing.npz: no such file"):
        ChunkedCodes.load(tmp_path / "missing.npz")


def test_a_npz_without_the_codes_or_their_length_says_so_once(tmp_path):
    np.savez(tmp_path / "partial.npz", codes=np.zeros((1, 2, 3), dtype=np.int64))
    with pytest.raises(AudioInputError) as raised:
        ChunkedCodes.load(tmp_path / "partial.npz")
    assert str(raised.value) == (
        f"{tmp_path / 'partial.npz'}: a .npz without 'codes' and 'samples'; give the .npz that this codec's encode "
        "wrote"
    )
