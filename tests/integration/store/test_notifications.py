"""The notifications table on every database: claims and outcomes under the shard's fence, one row per
(job, slot, kind), the default's rate limit decided in the claiming transaction, and what a new leader
finds (failed slots without a row, rows claimed and not sent)."""

from __future__ import annotations

import pytest

from shardcron.errors import FencedOut
from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.rules.notification_rate import Rate
from shardcron.rules.notifications import NotificationKind, NotificationStatus, Source
from shardcron.store import notifications as store
from shardcron.store.fences import ensure_shards, raise_fence
from shardcron.store.notifications import NotificationClaim
from shardcron.store.tick_results import record_results
from shardcron.store.ticks import SlotClaim, claim_ticks

F1, F2 = 100, 200
F = NotificationKind.ON_FAILURE
SPEC = '{"kind": "http", "url": "http://hooks.example/x"}'


@pytest.fixture
def led(store_engine):
    ensure_shards(store_engine, 2)
    raise_fence(store_engine, 0, F1, "a", 1_000)
    return store_engine


def claim(engine, slots, *, fence=F1, source=Source.JOB, rate=None, job="j", now_ms=10_000, shard=0):
    return store.claim(
        engine,
        [NotificationClaim(job, s, F, source, SPEC) for s in slots],
        shard=shard,
        fence=fence,
        node_id="a",
        now_ms=now_ms,
        default_rate=rate,
    )


def test_one_row_per_slot_and_kind_whoever_claims_it(led):
    assert [r.scheduled_at_ms for r in claim(led, [1000, 2000])] == [1000, 2000]
    assert claim(led, [1000, 2000, 3000])[0].scheduled_at_ms == 3000  # only the new one
    assert [r.scheduled_at_ms for r in store.unsent(led, {0}, now_ms=10**13)] == [1000, 2000, 3000]


def test_the_unsent_of_many_shards_come_in_one_read(led):
    raise_fence(led, 1, F1, "a", 1_000)
    claim(led, [1000])
    claim(led, [2000], job="k", shard=1)
    assert sorted((r.shard, r.job_id) for r in store.unsent(led, {0, 1}, now_ms=10**13)) == [(0, "j"), (1, "k")]
    assert [r.job_id for r in store.unsent(led, {1}, now_ms=10**13)] == ["k"]
    assert store.unsent(led, set(), now_ms=10**13) == []


def test_a_claim_or_an_outcome_under_an_older_fence_is_rejected_and_writes_nothing(led):
    row = claim(led, [1000])[0]
    raise_fence(led, 0, F2, "b", 2_000)
    with pytest.raises(FencedOut):
        claim(led, [2000], fence=F1)
    with pytest.raises(FencedOut):
        store.settle(led, row, NotificationStatus.SENT, fence=F1, node_id="a", attempts=1, error=None, now_ms=1)
    assert [(r.scheduled_at_ms, r.status) for r in store.list_for_job(led, "j")] == [(1000, NotificationStatus.CLAIMED)]
    # The new leader sends what was claimed and records it; a second settle changes nothing.
    assert store.settle(led, row, NotificationStatus.SENT, fence=F2, node_id="b", attempts=1, error=None, now_ms=1)
    assert not store.settle(led, row, NotificationStatus.FAILED, fence=F2, node_id="b", attempts=2, error="x", now_ms=2)
    assert store.unsent(led, {0}, now_ms=10**13) == []
    assert store.list_for_job(led, "j")[0].node_id == "b"


def test_the_default_is_rate_limited_per_job_in_the_claiming_transaction(led):
    rate = Rate(2, 60_000)
    rows = claim(led, [1000, 2000, 3000, 4000], source=Source.DEFAULT, rate=rate)
    assert [r.status for r in rows] == [NotificationStatus.CLAIMED] * 2 + [NotificationStatus.SUPPRESSED] * 2
    assert claim(led, [5000], source=Source.DEFAULT, rate=rate, job="other")[0].status is NotificationStatus.CLAIMED
    assert claim(led, [6000], source=Source.JOB, rate=rate)[0].status is NotificationStatus.CLAIMED  # own: no limit
    later = claim(led, [7000], source=Source.DEFAULT, rate=rate, now_ms=10_000 + 60_001)  # the window has passed
    assert later[0].status is NotificationStatus.CLAIMED


def test_a_new_leader_finds_failed_slots_without_a_notification_and_the_previous_run(led):
    slots = [1000, 2000, 3000, 4000]
    claim_ticks(led, [SlotClaim("j", s) for s in slots], shard=0, fence=F1, node_id="a", now_ms=500)
    outcome = {1000: TickStatus.SUCCEEDED, 2000: TickStatus.FAILED, 3000: TickStatus.FAILED, 4000: TickStatus.SUCCEEDED}
    record_results(
        led,
        [(SlotRef("j", s), 1, ExecutionResult(st is TickStatus.SUCCEEDED, s, s + 1), st) for s, st in outcome.items()],
        shard=0,
        fence=F1,
    )
    claim(led, [2000])
    assert store.failed_without_notification(led, 0, ["j"], since_ms=0) == [("j", 3000)]
    assert store.failed_without_notification(led, 0, ["j"], since_ms=3000) == []
    assert store.failed_without_notification(led, 1, ["j"], since_ms=0) == []
    assert store.failed_without_notification(led, 0, ["other"], since_ms=0) == []  # only the jobs that want it
    assert store.recently_failed_jobs(led, 0, ["j"], since_ms=0) == {"j"}
    assert store.previous_run_status(led, "j", 4000) is TickStatus.FAILED
    assert store.previous_run_status(led, "j", 2000) is TickStatus.SUCCEEDED
    assert store.previous_run_status(led, "j", 1000) is None
    assert [r.scheduled_at_ms for r in store.between(led, 1500, 2500)] == [2000]


def test_the_next_run_after_a_slot_for_a_failure_that_lands_after_a_later_success(led):
    claim_ticks(led, [SlotClaim("j", s) for s in (1000, 2000, 3000)], shard=0, fence=F1, node_id="a", now_ms=500)
    record_results(
        led, [(SlotRef("j", 3000), 1, ExecutionResult(True, 3000, 3001), TickStatus.SUCCEEDED)], shard=0, fence=F1
    )
    assert store.next_run(led, "j", 1000) == (3000, TickStatus.SUCCEEDED)  # 2000 still unfinished: passed over
    assert store.next_run(led, "j", 3000) is None
