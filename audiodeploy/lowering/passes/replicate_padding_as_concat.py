"""Write a replicate padding of the last dimension as a concatenation XNNPACK delegates.

``F.pad(x, (l, r), mode="replicate")`` (BigVGAN's anti-aliased activations pad
every resampling this way) exports as ``aten.pad`` with mode ``"replicate"``,
which edge lowering decomposes into ``arange``, ``clamp`` and ``index``:
ExecuTorch 1.5.1's XNNPACK partitioner has no config for any of them, so each
padding cuts the delegate. The padded signal is the input between copies of its
first and last samples, and XNNPACK concatenates (also along a dynamic length).
The first and last samples themselves are the hard part when the length ``T``
is symbolic: 1.5.1 declines a slice whose input size is symbolic, so they are
selected by a matrix product with a ``[T, l + r]`` selector of one-hot columns
instead::

    before

    x [.., T] ── pad([l, r], "replicate") ── [.., l + T + r]

    after, T fixed

    x ─┬─ slice(-1, 0, 1) ──── mul(ones [l]) ──┐
       ├───────────────────────────────────────┼─ cat(-1) ── [.., l + T + r]
       └─ slice(-1, T-1, T) ── mul(ones [r]) ──┘

    after, T symbolic

    x ── view [1, M, T] ─┬──────────────────────────────────── bmm ── view [.., l + r] ─┬─ slice(-1, 0, l) ───┐
                         │                                      │                       └─ slice(-1, l, l+r) ─┤
                         └─ conv1d(zeros [1, M, 1], bias 1) ── ones [1, 1, T]           x ───────────────────┼─ cat(-1)
                            ── conv1d(E [l + r, 1, 3], padding 1) ── permute ── S [1, T, l + r] ──┘

``E`` holds ``l`` kernels ``[-1, 1, 0]`` (a one at the first sample of a
length-``T`` row of ones, zero elsewhere: the zero padding is the only
difference between neighbours) and ``r`` kernels ``[0, 1, -1]`` (a one at the
last sample). The selector depends on ``T`` alone, so one is computed per
symbolic length and pair ``(l, r)`` and shared by every padding of that length;
its row of ones is read from the first such padding's input. ``M`` is the
product of the leading dimensions (the view is skipped when ``x`` is
``[1, M, T]`` already).

The results equal the padding's exactly for finite inputs: every product is by
one or zero and every sum adds zeros. An infinite or NaN sample makes the row
of ones NaN there (``0 * inf``), so a padding whose selector was read from that
tensor gets NaN edges where replicate padding would copy finite ones.

The pass leaves a padding as it is, and does nothing on a program without one,
unless it is a replicate padding (``aten.pad`` with mode ``"replicate"``, or
``replication_pad1d``) of the last dimension only, by non-negative amounts, of
a float32 tensor whose leading dimensions are fixed.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import EdgePaddingAsConcatPass, add_constant, insert_op

aten = torch.ops.aten

# Cross-correlation kernels over a zero-padded row of ones: out[j] = u[j] - u[j-1] is one at j = 0 only,
# out[j] = u[j] - u[j+1] one at j = T - 1 only.
_FIRST_SAMPLE_KERNEL = (-1.0, 1.0, 0.0)
_LAST_SAMPLE_KERNEL = (0.0, 1.0, -1.0)


class ReplicatePaddingAsConcatPass(EdgePaddingAsConcatPass):
    targets = frozenset({aten.pad.default, aten.replication_pad1d.default})
    mode = "replicate"

    def sliced_edges(
        self, x: torch.fx.Node, length: int, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right padding (each a list of zero or one node) from static slices of the ends."""
        parts: list[list[torch.fx.Node]] = []
        for count, start in ((left, 0), (right, length - 1)):
            if count == 0:
                parts.append([])
                continue
            sample = insert_op(self.graph, aten.slice.Tensor, (x, -1, start, start + 1), origin=origin)
            ones = add_constant(self.exported_program, self.graph, "replicate_padding_ones", torch.ones(count))
            parts.append([insert_op(self.graph, aten.mul.Tensor, (sample, ones), origin=origin)])
        return parts[0], parts[1]

    def edge_kernels(self, left: int, right: int) -> tuple[torch.Tensor, int]:
        """``l`` kernels one at the first sample, ``r`` at the last."""
        return torch.tensor([_FIRST_SAMPLE_KERNEL] * left + [_LAST_SAMPLE_KERNEL] * right).unsqueeze(1), 1
