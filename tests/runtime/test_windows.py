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


@pytest.mark.parametrize("total, window, lead", [(250, 75, 8), (76, 75, 8), (1000, 38, 8), (977, 64, 13)])
def test_windows_that_carry_a_state_hand_over_a_lead_into_the_later_window(total, window, lead):
    """A carried state makes a window exact up to its end and from its lead on: every later window keeps from its
    lead, the one before it up to there, and the windows overlap by the lead alone."""
    plan = plan_windows(total, window, lead, 2, lead=lead)
    covered = [w.start + j for w in plan.windows for j in range(w.keep_start, w.keep_stop)]
    assert covered == list(range(total))
    assert plan.windows[0].keep_start == 0
    assert all(w.keep_start == lead for w in plan.windows[1:])
    # Windows advance by the window less the lead; the last is moved back to end at the input's end.
    assert [b.start - a.start for a, b in itertools.pairwise(plan.windows[:-1])] == [window - lead] * (
        len(plan.windows) - 2
    )
    assert plan.windows[-1].start + window == total


def test_a_lead_longer_than_the_overlap_is_refused():
    with pytest.raises(ValueError, match="lead of 9 units does not fit an overlap of 8"):
        plan_windows(200, 50, 8, 2, lead=9)
