"""Pruning in the store (store/retention.py), on every database: fenced batches, what is kept, the horizons."""

from __future__ import annotations

import pytest

from shardcron.errors import FencedOut
from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.store import raise_fence
from shardcron.store.retention import horizons_of_jobs, prune_job_batch, prune_shard_batch, shard_horizons_by_shard
from shardcron.store.tick_results import record_results
from shardcron.store.ticks import SlotClaim, claim_ticks
from tests.integration.store.test_store import F1, F2, NODE_A, NODE_B
from tests.support.retention import MIN, slots

A = dict(shard=0, fence=F1)


def test_shard_pruning_keeps_unresolved_and_newest_ticks_and_records_the_horizon_first(led):
    # Batches of 2: the oldest deletable rows go first; "old"'s only (newest) tick and the running one stay.
    assert prune_shard_batch(led, horizon_ms=6 * MIN, limit=2, now_ms=5, **A) == 2
    assert slots(led, "j") == [3, 4, 5, 6, 7, 8, 9, 10]
    assert shard_horizons_by_shard(led) == {0: 6 * MIN}
    assert prune_shard_batch(led, horizon_ms=6 * MIN, limit=100, now_ms=6, **A) == 2
    assert slots(led, "j") == [4, 6, 7, 8, 9, 10]
    assert slots(led, "old") == [1]
    assert prune_shard_batch(led, horizon_ms=6 * MIN, limit=100, now_ms=7, **A) == 0  # nothing left to do

    # A manual run after "old"'s only scheduled tick: both stay (catch-up resumes from the scheduled one);
    # once a newer scheduled tick exists, the older ones go, the manual one with them.
    claim_ticks(led, [SlotClaim("old", 2 * MIN, manual=True)], node_id=NODE_A, now_ms=8, **A)
    record_results(led, [(SlotRef("old", 2 * MIN), 1, ExecutionResult(True, 1, 2), TickStatus.SUCCEEDED)], **A)
    assert prune_shard_batch(led, horizon_ms=6 * MIN, limit=100, now_ms=8, **A) == 0
    assert slots(led, "old") == [1, 2]
    claim_ticks(led, [SlotClaim("old", 3 * MIN)], node_id=NODE_A, now_ms=9, **A)
    record_results(led, [(SlotRef("old", 3 * MIN), 1, ExecutionResult(True, 1, 2), TickStatus.SUCCEEDED)], **A)
    assert prune_shard_batch(led, horizon_ms=6 * MIN, limit=100, now_ms=9, **A) == 2
    assert slots(led, "old") == [3]

    # The horizon never moves back (a new leader with a lagging clock).
    assert prune_shard_batch(led, horizon_ms=2 * MIN, limit=100, now_ms=8, **A) == 0
    assert shard_horizons_by_shard(led) == {0: 6 * MIN}
    assert horizons_of_jobs(led, ["j", "old", "nosuch"]) == {"j": 6 * MIN, "old": 6 * MIN}


def test_a_batch_under_an_older_fence_is_refused_and_deletes_nothing(led):
    raise_fence(led, 0, F2, NODE_B, 2_000)
    with pytest.raises(FencedOut):
        prune_shard_batch(led, horizon_ms=100 * MIN, limit=100, now_ms=5, **A)
    with pytest.raises(FencedOut):
        prune_job_batch(led, job_id="j", keep=1, limit=100, now_ms=5, **A)
    assert slots(led, "j") == list(range(1, 11))
    assert shard_horizons_by_shard(led) == {}
    assert horizons_of_jobs(led, ["j"]) == {}


def test_history_limit_keeps_the_newest_ticks_and_records_the_job_horizon(led):
    assert prune_job_batch(led, job_id="j", keep=20, limit=100, now_ms=5, **A) == 0  # fewer than the limit
    assert horizons_of_jobs(led, ["j"]) == {}
    assert prune_job_batch(led, job_id="j", keep=3, limit=100, now_ms=5, **A) == 6  # 1-7 but the running 4
    assert slots(led, "j") == [4, 8, 9, 10]
    assert horizons_of_jobs(led, ["j", "old"]) == {"j": 8 * MIN}
    # A shard horizon further on wins for the audit; the other job keeps its own.
    prune_shard_batch(led, horizon_ms=9 * MIN, limit=100, now_ms=6, **A)
    assert horizons_of_jobs(led, ["j", "old"]) == {"j": 9 * MIN, "old": 9 * MIN}


def test_a_pruned_ticks_settled_notifications_go_with_it_and_a_claimed_one_stays(led):
    from shardcron.rules.notifications import NotificationKind, NotificationStatus, Source
    from shardcron.store import notifications as notification_store
    from shardcron.store.notifications import NotificationClaim

    spec = '{"kind": "http", "url": "http://hooks.example/x"}'
    rows = notification_store.claim(
        led,
        [NotificationClaim("j", MIN * i, NotificationKind.ON_FAILURE, Source.JOB, spec) for i in (1, 2, 8)],
        node_id=NODE_A,
        now_ms=3,
        default_rate=None,
        **A,
    )
    notification_store.settle(
        led, rows[0], NotificationStatus.SENT, fence=F1, node_id=NODE_A, attempts=1, error=None, now_ms=4
    )  # slot 2 stays claimed: its sender has not finished
    assert prune_shard_batch(led, horizon_ms=6 * MIN, limit=100, now_ms=5, **A) == 4  # 1, 2, 3, 5
    assert [(r.scheduled_at_ms // MIN, r.status) for r in notification_store.list_for_job(led, "j")] == [
        (2, NotificationStatus.CLAIMED),
        (8, NotificationStatus.CLAIMED),
    ]
