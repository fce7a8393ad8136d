"""Pieces of audio models the pass tests share."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering import MethodReport
from tests.pipeline import lower_and_compare, lower_stock_and_rewritten
from tests.shared import shared_value

ATTENTION_FRAMES = Dim("frames", min=8, max=64)
"""The lengths the attention tests export an utterance's features ``[1, T, 32]`` for."""


def relative_position_buckets(length: int, num_buckets: int = 16, max_distance: int = 64) -> torch.Tensor:
    """WavLM's bucketing of j - i on a [length, length] grid (integer ops, a log, a where)."""
    positions = torch.arange(length)
    relative = positions[None, :] - positions[:, None]
    half = num_buckets // 2
    buckets = (relative > 0).to(torch.long) * half
    distance = relative.abs()
    exact = half // 2
    large = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (half - exact)).to(
        torch.long
    )
    large = torch.min(large, torch.full_like(large, half - 1))
    return buckets + torch.where(distance < exact, distance, large)


def attention_ends() -> list[tuple[torch.Tensor]]:
    """Features ``[1, T, 32]`` at the shortest and the longest length of :data:`ATTENTION_FRAMES`."""
    return [(torch.randn(1, ATTENTION_FRAMES.min, 32),), (torch.randn(1, ATTENTION_FRAMES.max, 32),)]


def lower_attention_stock_and_rewritten(module: torch.nn.Module, rewrite: str) -> MethodReport:
    """An attention's end-to-end test: ``module`` on features ``[1, T, 32]`` lowered over :data:`ATTENTION_FRAMES`
    stock and with the rewrites, the rewritten one run at 20 frames and both ends and one delegate that ``rewrite``
    changed (:func:`~tests.pipeline.lower_stock_and_rewritten`); the stock report."""
    x = torch.randn(1, 20, 32)
    dynamic_shapes = ({1: ATTENTION_FRAMES},)
    stock, _ = lower_stock_and_rewritten(
        module, (x,), rewrite, dynamic_shapes=dynamic_shapes, also_run=attention_ends()
    )
    return stock


class MaskedAttention(torch.nn.Module):
    """Self-attention over features ``[1, T, 32]`` (4 heads) with the boolean mask ``keep(T)`` applied as
    transformers' implementations apply it: ``sdpa`` (its ``attn_mask``), ``add`` (eager: zeros and
    ``finfo.min`` added to the scores), on the scores with ``where`` or ``masked_fill``, or selecting position
    scores for sdpa's float mask (``sdpa-bias``)."""

    def __init__(self, how: str, keep: Callable[[int], torch.Tensor]) -> None:
        super().__init__()
        self.how, self.keep = how, keep
        self.qkv = torch.nn.Linear(32, 96)
        self.out = torch.nn.Linear(32, 32)

    def forward(self, x):
        frames = x.shape[1]
        q, k, v = (t.view(1, frames, 4, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        keep = self.keep(frames)
        if self.how == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        elif self.how == "sdpa-bias":  # a float mask of position scores, where keep selects them (Wav2Vec2-BERT)
            bias = torch.matmul(q, q.transpose(2, 3)) * 0.1
            mask = torch.where(keep, bias, torch.finfo(torch.float32).min)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) * 8**-0.5
            if self.how == "add":
                scores = scores + torch.where(keep, torch.zeros(()), torch.finfo(torch.float32).min)
            elif self.how == "where":
                scores = torch.where(keep, scores, float("-inf"))
            else:
                scores = scores.masked_fill(~keep, float("-inf"))
            out = torch.matmul(scores.softmax(-1), v)
        return self.out(out.transpose(1, 2).contiguous().reshape(1, frames, 32))


HEADS, WIDTH, TABLE_POSITIONS = 2, 16, 100
"""The relative-shift attention's heads, features and the positions its sinusoid table covers."""
# A signal of frames, as a feature extractor's output: at a length of frames itself, export cannot prove the skew's
# view valid ((2T - 1) % T != 0 for every T > 1) and fixes the length.
SIGNAL = WIDTH * Dim("frames", min=4, max=48)


def sinusoids(positions: int, width: int, *, interleaved: bool) -> torch.Tensor:
    """A Transformer-XL table of distances ``positions - 1 .. -(positions - 1)``: sines and cosines, in pairs of
    columns (``interleaved``, Wav2Vec2-Conformer's) or in two halves (ESPnet's and NeMo's older layout)."""
    distances = torch.arange(positions - 1, -positions, -1, dtype=torch.float32).unsqueeze(1)
    frequencies = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * -(math.log(10000.0) / width))
    sines, cosines = torch.sin(distances * frequencies), torch.cos(distances * frequencies)
    table = torch.stack([sines, cosines], dim=2).flatten(1) if interleaved else torch.cat([sines, cosines], dim=1)
    return table.unsqueeze(0)


class RelativeShiftScores(torch.nn.Module):
    """Wav2Vec2-Conformer's relative attention: the table cut to the length, projected, scored against the queries
    and skewed, added to the content scores."""

    def __init__(self, table: torch.Tensor, heads: int = HEADS) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, WIDTH // heads
        self.register_buffer("pe", table, persistent=False)
        self.linear_pos = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.linear_q = torch.nn.Linear(WIDTH, WIDTH)
        self.pos_bias_v = torch.nn.Parameter(torch.randn(heads, WIDTH // heads))

    def table(self, n: int) -> torch.Tensor:
        """The sinusoids of distances ``n - 1 .. -(n - 1)``: ``[1, 2n - 1, WIDTH]``."""
        center = self.pe.shape[1] // 2
        return self.pe[:, center - n + 1 : center + n]

    def forward(self, signal):
        x = signal.view(1, -1, WIDTH)
        n = x.shape[1]
        positions = self.linear_pos(self.table(n))
        positions = positions.view(1, -1, self.heads, self.head_dim).permute(0, 2, 3, 1)
        q = self.linear_q(x).view(1, n, self.heads, self.head_dim).transpose(1, 2)
        scores = self.shift(torch.matmul(q + self.pos_bias_v[None, :, None, :], positions))
        weights = torch.softmax(torch.matmul(q, q.transpose(-1, -2)) * 0.25 + scores, -1)
        return torch.matmul(weights, q).transpose(1, 2).reshape(1, n, WIDTH)

    @staticmethod
    def shift(scores: torch.Tensor) -> torch.Tensor:
        """transformers' and NeMo's: a zero column padded."""
        shape = scores.shape
        padded = torch.nn.functional.pad(scores, (1, 0)).view(*shape[:2], shape[3] + 1, shape[2])
        return padded[..., 1:, :].view(shape)[..., : shape[2]]


def relative_shift_frames(n: int) -> tuple[torch.Tensor]:
    """:class:`RelativeShiftScores`' input of ``n`` frames."""
    return (torch.randn(1, n * WIDTH),)


def learnt_relative_shift_table() -> torch.Tensor:
    """A table for :class:`RelativeShiftScores` that the sinusoid rewrite does not take: its shift stays outside the
    delegate."""
    return torch.randn(1, 2 * TABLE_POSITIONS - 1, WIDTH)


def lowered_learnt_relative_shift() -> MethodReport:
    """:class:`RelativeShiftScores` with a :func:`learnt_relative_shift_table` (seed 0) lowered over :data:`SIGNAL`
    and checked against eager at 20, 4, 48 and 33 frames: its report, lowered once per test run for the tests of
    the passes that shape it (the attention around the shift, the sizes read from the input)."""

    def lower() -> MethodReport:
        torch.manual_seed(0)
        module = RelativeShiftScores(learnt_relative_shift_table()).eval()
        frames = [relative_shift_frames(n) for n in (20, 4, 48, 33)]
        return lower_and_compare(module, frames[0], dynamic_shapes=({1: SIGNAL},), also_run=frames[1:])

    return shared_value("lowered-learnt-relative-shift", lower)
