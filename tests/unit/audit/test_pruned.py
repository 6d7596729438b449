"""The audit and retention, pure: absent slots below a job's horizon are pruned, never missing."""

from __future__ import annotations

import pytest

from shardcron.rules.audit import MissingSlots, split_pruned, window_retention
from shardcron.rules.retention import PruneState

FOUND = MissingSlots(slots_checked=10, missing=(5, 8, 9), excused=(1, 2))


@pytest.mark.parametrize(
    "horizon, missing, excused, pruned",
    [
        pytest.param(None, (5, 8, 9), (1, 2), (), id="never-pruned"),
        pytest.param(1, (5, 8, 9), (1, 2), (), id="horizon-at-the-first-slot-explains-nothing"),
        pytest.param(6, (8, 9), (), (5, 1, 2), id="below-the-horizon-is-pruned-missing-or-excused"),
        pytest.param(100, (), (), (5, 8, 9, 1, 2), id="all-pruned"),
    ],
)
def test_split_pruned(horizon, missing, excused, pruned):
    got = split_pruned(FOUND, horizon)
    assert (got.slots_checked, got.missing, got.excused, got.pruned) == (10, missing, excused, pruned)


@pytest.mark.parametrize(
    "horizons, state",
    [
        pytest.param([], PruneState.INTACT, id="no-jobs"),
        pytest.param([None, None], PruneState.INTACT, id="never-pruned"),
        pytest.param([100, 100], PruneState.INTACT, id="horizon-just-after-the-window-start"),  # window is (100, 200]
        pytest.param([201, 500], PruneState.PRUNED, id="every-job-pruned-past-the-end"),
        pytest.param([150], PruneState.PARTIALLY_PRUNED, id="horizon-inside"),
        pytest.param([None, 500], PruneState.PARTIALLY_PRUNED, id="one-job-pruned-one-not"),
    ],
)
def test_window_retention(horizons, state):
    assert window_retention(100, 200, horizons) is state
