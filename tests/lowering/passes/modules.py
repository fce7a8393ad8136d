"""Pieces of audio models the pass tests share."""

from __future__ import annotations

import math

import torch


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
