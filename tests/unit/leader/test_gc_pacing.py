"""The dispatcher's collections between starts (leader/gc_pacing.py): which generation, when."""

from __future__ import annotations

import pytest

from shardcron.leader.gc_pacing import HARD, SOFT, GcPacer, generation_to_collect, next_estimate

PAUSES = (4.0, 20.0, 40.0)  # ms: a young, a middle, a full collection


@pytest.mark.parametrize(
    "counts, gap_ms, expected, why",
    [
        ((SOFT[0] - 1, 0, 0), None, None, "nothing due: below every soft count"),
        ((SOFT[0], 0, 0), None, 0, "young due, nothing to start: collect"),
        ((SOFT[0], 0, 0), 4.0 * 1.5 + 1.0, 0, "young due, the gap holds its pause with the margin"),
        ((SOFT[0], 0, 0), 4.0 * 1.5 + 0.9, None, "young due, the gap is short of the margin"),
        ((SOFT[0], 0, 0), 0.0, None, "a start is due now"),
        ((SOFT[0], 0, 0), -5.0, None, "a start is overdue"),
        ((SOFT[0], SOFT[1], 0), 50.0, 1, "middle due and fits: the older one first"),
        ((SOFT[0], SOFT[1], 0), 10.0, 0, "middle due but does not fit: young instead"),
        ((100, SOFT[1], 0), 10.0, None, "middle due, does not fit, young not due"),
        ((100, HARD[1], 0), 0.0, 1, "middle past its hard count: collected with a start due"),
        ((100, HARD[1], HARD[2]), 0.0, 2, "full past its hard count: collected with a start due"),
        ((SOFT[0], SOFT[1], SOFT[2]), 100.0, 2, "full due and fits"),
        ((SOFT[0], SOFT[1], SOFT[2]), 40.0, 1, "full does not fit, middle does"),
        ((SOFT[0], SOFT[1], SOFT[2]), None, 2, "everything due, nothing to start: the oldest"),
        ((SOFT[0] * 20, 0, 0), 0.0, None, "young never forced: the interpreter's own threshold is the backstop"),
    ],
)
def test_generation_to_collect(counts, gap_ms, expected, why):
    assert generation_to_collect(counts, gap_ms, PAUSES) == expected, why


@pytest.mark.parametrize(
    "previous, measured, expected",
    [
        (5.0, 9.0, 9.0),  # longer: believed at once
        (10.0, 5.0, 9.0),  # shorter: a fifth of the way
        (10.0, 10.0, 10.0),
    ],
)
def test_next_estimate(previous, measured, expected):
    assert next_estimate(previous, measured) == pytest.approx(expected)


def test_the_pacer_collects_what_fits_and_learns_its_pause():
    collected = []
    counts = [(SOFT[0], 0, 0)]
    pacer = GcPacer(collect=collected.append, counts=lambda: counts[0])
    pacer.pause_ms = [50.0, 30.0, 60.0]  # a long young pause remembered
    assert pacer.between_starts(20.0) is None and collected == []
    assert pacer.between_starts(None) == 0 and collected == [0]
    assert pacer.pause_ms[0] < 50.0, "the measured pause (a list append) brings the estimate down"
    counts[0] = (10, 0, 0)
    assert pacer.between_starts(None) is None and collected == [0]
