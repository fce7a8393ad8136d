"""Inputs of any length through a program of bounded length: overlapping windows, stitched.

The input is counted in *units*: the steps of the program's length axis that map to one step of its output
(320 samples for a wav2vec2 encoder, whose output has one frame per 320 samples; one mel frame for a vocoder,
whose output has `hop` samples per frame). Output unit `j` of a window that starts at input unit `s` is output
unit `s + j` of the whole input. A program may give `tail` fewer output units than it takes input units (the
receptive field of a convolution stack: wav2vec2 gives `L / 320 - 1` frames for `L` samples).

    input units   0 ─────────────────────────────────────────── total
    window 0      [0 ─────────────── W)
    window 1                  [s1 ─────────────── s1+W)
    window 2 (last)                         [total-W ──────────── total)
    kept          [0 ────── cut1)[cut1 ───── cut2)[cut2 ──────── total-tail)

Every output unit comes from exactly one window. Windows advance by `W - overlap`; the last one is moved back to
end at the input's end, so that it is full and no padding is fed unless the whole input is shorter than one
window. Neighbours hand over in the middle of their overlap, so a kept unit is at least `overlap / 2` units away
from the edge of the window it comes from, except at the input's own ends. A program that carries its state from
one window to the next (`audiodeploy.program.description.CarriedState`) is exact up to a window's end and from its
`lead` on: neighbours hand over `lead` units into the later window.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """One run of the program: input units ``[start, start + units)``, of which ``valid`` are real input and
    the rest zero padding; output units ``[keep_start, keep_stop)`` of the window (counted from its start)
    are kept."""

    start: int
    units: int
    valid: int
    keep_start: int
    keep_stop: int

    @property
    def kept(self) -> int:
        return self.keep_stop - self.keep_start


@dataclass(frozen=True)
class WindowPlan:
    windows: tuple[Window, ...]
    output_units: int
    """Output units of the whole input: `total - tail`, at least one."""


def plan_windows(
    total: int, window: int, overlap: int, min_units: int, tail: int = 0, lead: int | None = None
) -> WindowPlan:
    """The windows that cover `total` input units with windows of `window` units overlapping by `overlap`.

    `min_units` is the shortest input the program takes (a shorter whole input is zero-padded up to it);
    `tail` is how many fewer output units than input units a window gives; `lead`, when given, how many units
    into the later window neighbours hand over (at most `overlap`), else in the middle of their overlap.
    """
    if total < 1:
        raise ValueError("the input is empty")
    if not 0 < min_units <= window:
        raise ValueError(f"a window of {window} units is shorter than the program's minimum of {min_units}")
    if lead is not None and not 0 <= lead <= overlap:
        raise ValueError(f"a lead of {lead} units does not fit an overlap of {overlap}")
    if not tail <= overlap < window:
        raise ValueError(
            f"an overlap of {overlap} units does not fit windows of {window} units: "
            f"it must be at least {tail} and less than the window"
        )
    output_units = max(1, total - tail)
    if total <= window:
        units = max(total, min_units)
        return WindowPlan((Window(0, units, total, 0, output_units),), output_units)
    step = window - overlap
    starts = list(range(0, total - window, step)) + [total - window]
    if len(starts) > 1 and starts[-2] == starts[-1]:
        starts.pop()
    # Each neighbour pair hands over in the middle of the output units both of them give, or `lead` units into the
    # later window.
    handovers = [
        later + lead if lead is not None else (later + earlier + window - tail) // 2
        for earlier, later in zip(starts, starts[1:])
    ]
    cuts = [0, *handovers, output_units]
    windows = tuple(
        Window(start, window, window, cuts[i] - start, cuts[i + 1] - start) for i, start in enumerate(starts)
    )
    return WindowPlan(windows, output_units)
