"""Window plans: every output step from exactly one window, away from window edges, no needless padding."""

from __future__ import annotations

import itertools

import pytest

from audiodeploy.runtime.windows import plan_windows

CASES = [
    # total, window, overlap, min, tail
    (1, 50, 10, 2, 0),
    (49, 50, 10, 2, 1),
    (50, 50, 10, 2, 1),
    (51, 50, 10, 2, 1),
    (1000, 50, 10, 2, 1),
    (1000, 50, 0, 2, 0),
    (977, 64, 13, 4, 2),
    (30_000, 500, 100, 50, 1),
]


@pytest.mark.parametrize("total, window, overlap, min_units, tail", CASES)
def test_every_output_unit_comes_from_exactly_one_window(total, window, overlap, min_units, tail):
    plan = plan_windows(total, window, overlap, min_units, tail)
    covered = [w.start + j for w in plan.windows for j in range(w.keep_start, w.keep_stop)]
    assert covered == list(range(plan.output_units))
    assert plan.output_units == max(1, total - tail)
    for w in plan.windows:
        assert 0 <= w.keep_start <= w.keep_stop <= w.units - tail or len(plan.windows) == 1
        assert w.valid <= w.units and w.start + w.valid <= total


@pytest.mark.parametrize("total, window, overlap, min_units, tail", [c for c in CASES if c[0] > c[1]])
def test_long_inputs_run_in_full_windows_and_keep_away_from_their_edges(total, window, overlap, min_units, tail):
    plan = plan_windows(total, window, overlap, min_units, tail)
    assert all(w.units == w.valid == window for w in plan.windows)  # no padding at all
    assert plan.windows[-1].start + window == total  # the last window ends at the input's end
    margin = overlap // 2 - tail
    for earlier, later in itertools.pairwise(plan.windows):
        assert earlier.keep_stop <= window - tail - margin  # the hand-over is inside both windows' outputs
        assert later.keep_start >= margin


def test_a_short_input_is_padded_up_to_the_minimum_in_one_window():
    (window,) = plan_windows(3, 50, 10, 8, tail=1).windows
    assert (window.units, window.valid, window.keep_start, window.keep_stop) == (8, 3, 0, 2)


@pytest.mark.parametrize("overlap", [50, 60, 0])
def test_an_overlap_that_does_not_fit_is_refused(overlap):
    with pytest.raises(ValueError, match="overlap"):
        plan_windows(200, 50, overlap, 2, tail=1)
