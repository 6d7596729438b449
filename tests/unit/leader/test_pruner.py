"""pruner.in_batches: the batch loop the leaders and ``db prune`` share (sizes, rests, when it stops)."""

from __future__ import annotations

import pytest

from shardcron.leader.pruner import in_batches
from shardcron.rules.retention import MAX_DELETE_BATCH, MIN_DELETE_BATCH


class Rows:
    """``left`` deletable rows; each batch deletes up to its limit and records the limit it was given."""

    def __init__(self, left: int):
        self.left, self.limits, self.got = left, [], []

    def batch(self, limit: int) -> int:
        self.limits.append(limit)
        n = min(limit, self.left)
        self.left -= n
        self.got.append(n)
        return n


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param(0, id="nothing-to-do"),
        pytest.param(99, id="fewer-than-a-batch"),
        pytest.param(100, id="a-full-batch-asks-again"),
        pytest.param(50_000, id="many-batches"),
    ],
)
def test_runs_until_a_batch_comes_back_short(rows):
    r = Rows(rows)
    deleted, size = in_batches(r.batch, size=100, keep_going=lambda: True, rest=lambda s: False)
    assert (deleted, r.left) == (rows, 0)
    assert r.got[:-1] == r.limits[:-1] and r.got[-1] < r.limits[-1]  # it stopped at the first short batch
    # Sizes are steered by time: at most doubled, never outside the bounds (a stall may shrink them).
    assert all(
        MIN_DELETE_BATCH <= b <= min(2 * a, MAX_DELETE_BATCH)
        for a, b in zip(r.limits, r.limits[1:] + [size], strict=True)
    )


def test_stops_when_told_between_batches():
    r = Rows(10_000)
    assert in_batches(r.batch, size=100, keep_going=lambda: True, rest=lambda s: True)[0] == 100  # stop set
    turns = iter([True, True, False])
    assert in_batches(r.batch, size=100, keep_going=lambda: next(turns), rest=lambda s: False)[0] == 300
    assert in_batches(r.batch, size=100, keep_going=lambda: False, rest=lambda s: False)[0] == 0
