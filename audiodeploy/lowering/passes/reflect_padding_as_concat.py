"""Write a reflect padding of the last dimension as a concatenation XNNPACK delegates.

``F.pad(x, (l, r), mode="reflect")`` on a signal ``[N, C, T]`` (the padding of
EnCodec's, DAC's and UnivNet's convolutions) exports as ``aten.pad`` with mode
``"reflect"``, which edge lowering decomposes into ``arange``, ``sub``, ``abs``
and ``index``: ExecuTorch 1.5.1's XNNPACK partitioner has no config for them.
The padded signal is the input between its reversed edges, ``x[.., l:0:-1]`` on
the left and ``x[.., T-2:T-r-2:-1]`` on the right, and XNNPACK concatenates
(also along a dynamic length). When ``T`` is symbolic 1.5.1 declines any slice
of that dimension, so, as :mod:`.replicate_padding_as_concat` does for its
edges, the reversed samples are selected by a matrix product with a
``[T, l + r]`` selector of one-hot columns::

    before

    x [.., T] ── pad([l, r], "reflect") ── [.., l + T + r]

    after, T fixed

    x ─┬─ slice(-1, l, l+1) ── .. ── slice(-1, 1, 2) ──────────────┐
       ├───────────────────────────────────────────────────────────┼─ cat(-1) ── [.., l + T + r]
       └─ slice(-1, T-2, T-1) ── .. ── slice(-1, T-r-1, T-r) ──────┘

    after, T symbolic

    x ── view [1, M, T] ─┬──────────────────────────────────── bmm ── view [.., l + r] ─┬─ slice(-1, 0, l) ───┐
                         │                                      │                       └─ slice(-1, l, l+r) ─┤
                         └─ conv1d(zeros [1, M, 1], bias 1) ── ones [1, 1, T]           x ───────────────────┼─ cat(-1)
                            ── conv1d(E [l + r, 1, 2P+1], padding P) ── permute ── S [1, T, l + r] ─┘

Column ``j < l`` of ``S`` is one at sample ``l - j``, column ``l + j`` at sample
``T - 2 - j``. Over a row of ones ``u`` zero-padded by ``P = max(l, r) + 1``, a
one at sample ``k`` is ``u[t - k] - u[t - k - 1]`` and a one at sample
``T - 1 - k`` is ``u[t + k] - u[t + k + 1]`` (the padding's zeros are the only
difference between neighbours, as long as ``k < T``, which reflect padding
requires anyway), so ``E`` holds a ``1`` and a ``-1`` per column. The selector
depends on ``T`` alone: one is computed per symbolic length and pair ``(l, r)``
and shared by every padding of that length; its row of ones is read from the
first such padding's input. ``M`` is the product of the leading dimensions.

The results equal the padding's exactly for finite inputs: every product is by
one or zero and every sum adds zeros. An infinite or NaN sample makes the row
of ones NaN there (``0 * inf``), so a padding whose selector was read from that
tensor gets NaN edges where reflect padding would copy finite ones.

The pass leaves a padding as it is, and does nothing on a program without one,
unless it is a reflect padding (``aten.pad`` with mode ``"reflect"``, or
``reflection_pad1d``) of the last dimension only, by non-negative amounts, of a
float32 tensor whose leading dimensions are fixed.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import EdgePaddingAsConcatPass, insert_op

aten = torch.ops.aten


class ReflectPaddingAsConcatPass(EdgePaddingAsConcatPass):
    targets = frozenset({aten.pad.default, aten.reflection_pad1d.default})
    mode = "reflect"

    def sliced_edges(
        self, x: torch.fx.Node, length: int, left: int, right: int, *, origin: torch.fx.Node
    ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
        """The left and right padding as static slices of one sample each, in reflected order."""
        left_samples = [left - j for j in range(left)]
        right_samples = [length - 2 - j for j in range(right)]
        return (
            [insert_op(self.graph, aten.slice.Tensor, (x, -1, s, s + 1), origin=origin) for s in left_samples],
            [insert_op(self.graph, aten.slice.Tensor, (x, -1, s, s + 1), origin=origin) for s in right_samples],
        )

    def edge_kernels(self, left: int, right: int) -> tuple[torch.Tensor, int]:
        return reflected_sample_kernels(left, right), max(left, right) + 1


def reflected_sample_kernels(left: int, right: int) -> torch.Tensor:
    """``E [l + r, 1, 2P + 1]``: cross-correlated with a row of ones zero-padded by ``P = max(l, r) + 1``, kernel
    ``j < l`` is one at sample ``l - j`` only, kernel ``l + j`` at sample ``T - 2 - j`` only."""
    pad = max(left, right) + 1
    kernels = torch.zeros(left + right, 1, 2 * pad + 1)
    for j in range(left):  # u[t - k] - u[t - k - 1], k = l - j: taps at offsets -k and -k - 1
        k = left - j
        kernels[j, 0, pad - k] = 1.0
        kernels[j, 0, pad - k - 1] = -1.0
    for j in range(right):  # u[t + k] - u[t + k + 1], k = j + 1: one at sample T - 1 - k = T - 2 - j
        k = j + 1
        kernels[left + j, 0, pad + k] = 1.0
        kernels[left + j, 0, pad + k + 1] = -1.0
    return kernels
