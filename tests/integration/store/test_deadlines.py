"""Deadlines on tick rows, on every database: the fenced judgement records exactly what
``rules.deadlines.missed`` decides, once per slot and kind; acks keep the first one."""

from __future__ import annotations

import itertools

import pytest

from shardcron.errors import TickNotFound
from shardcron.model import RecordedMiss, TickStatus
from shardcron.rules.deadlines import DeadlineKind, Judgement, SlotState, missed
from shardcron.store import deadlines as store
from shardcron.store.fences import ensure_shards, raise_fence
from shardcron.store.schema import ticks

F1, F2 = 100, 200
DUE = 10_000
# Every row shape that matters around the due time: not started, started on time or late, settled
# each way on time or late, acked on time, late or never.
TIMES = (None, DUE - 1, DUE, DUE + 1)
STATES = [
    SlotState(status, started, finished, acked)
    for status in (TickStatus.CLAIMED, TickStatus.RUNNING, TickStatus.SUCCEEDED, TickStatus.FAILED, TickStatus.SKIPPED)
    for started, finished, acked in itertools.product(TIMES, TIMES, TIMES)
    if (finished is None) != status.is_final or status is TickStatus.SKIPPED
]
JUDGEMENTS = [
    (DeadlineKind.START, False),
    (DeadlineKind.FINISH, False),
    (DeadlineKind.FINISH, True),
    (DeadlineKind.HEARTBEAT, False),
]


@pytest.fixture
def led(store_engine):
    ensure_shards(store_engine, 1)
    raise_fence(store_engine, 0, F1, "a", 1_000)
    return store_engine


def insert(engine, job_id: str, state: SlotState, slot_ms: int = 0, manual: bool = False) -> None:
    with engine.begin() as conn:
        conn.execute(
            ticks.insert().values(
                job_id=job_id,
                scheduled_at_ms=slot_ms,
                shard=0,
                fence=F1,
                node_id="a",
                status=state.status.value,
                attempt=1,
                manual=manual,
                started_at_ms=state.started_at_ms,
                finished_at_ms=state.finished_at_ms,
                acked_at_ms=state.acked_at_ms,
            )
        )


def test_the_judgement_in_sql_is_the_rule_for_every_row_shape(led):
    for n, (kind, needs_ack) in enumerate(JUDGEMENTS):
        jobs = {f"j{n}-{i}": state for i, state in enumerate(STATES)}  # rows of their own: kinds share columns
        for job_id, state in jobs.items():
            insert(led, job_id, state)
        judgements = [Judgement(job_id, 0, kind, DUE, needs_ack) for job_id in jobs]
        got = store.record_misses(led, {(0, F1): judgements}, now_ms=DUE + 5)
        assert got.fenced_out == {}
        recorded = {j.job_id for _, j in got.value}
        wanted = {j.job_id for j in judgements if missed(j, jobs[j.job_id])}
        assert recorded == wanted, (kind, needs_ack)
        # Once: judged again (a successor re-judging), nothing more is recorded.
        assert store.record_misses(led, {(0, F1): judgements}, now_ms=DUE + 9).value == []


def test_a_judgement_under_an_older_fence_records_nothing(led):
    insert(led, "j", SlotState(TickStatus.RUNNING, 5, None, None))
    raise_fence(led, 0, F2, "b", 2_000)
    j = Judgement("j", 0, DeadlineKind.FINISH, DUE, False)
    out = store.record_misses(led, {(0, F1): [j]}, now_ms=DUE + 5)
    assert out.fenced_out == {0: F2} and out.value == []
    assert [u.open_kinds for u in store.unjudged(led, 0, {"j": 0})] == [frozenset(DeadlineKind)]


def test_a_new_leader_finds_the_open_kinds_of_scheduled_slots_only(led):
    insert(led, "j", SlotState(TickStatus.RUNNING, 5, None, None), slot_ms=0)
    insert(led, "j", SlotState(TickStatus.SUCCEEDED, 5, 6, None), slot_ms=1_000, manual=True)
    insert(led, "j", SlotState(TickStatus.RUNNING, 5, None, None), slot_ms=2_000)
    store.record_misses(led, {(0, F1): [Judgement("j", 0, DeadlineKind.START, 1, False)]}, now_ms=DUE)
    found = {u.scheduled_at_ms: u.open_kinds for u in store.unjudged(led, 0, {"j": 0})}
    assert found == {0: frozenset({DeadlineKind.FINISH, DeadlineKind.HEARTBEAT}), 2_000: frozenset(DeadlineKind)}
    assert [u.scheduled_at_ms for u in store.unjudged(led, 0, {"j": 1_500})] == [2_000]
    assert store.missed_without_notification(led, 0, {"j": 0}) == [("j", 0, DeadlineKind.START)]
    assert store.missed_without_notification(led, 0, {"j": 1}) == []


def test_an_ack_keeps_the_first_and_names_the_slot_it_found(led):
    insert(led, "j", SlotState(TickStatus.SUCCEEDED, 5, 6, None), slot_ms=1_000)
    insert(led, "j", SlotState(TickStatus.RUNNING, 5, None, None), slot_ms=2_000)
    newest = store.ack_tick(led, "j", None, shard=0, fence=F1, now_ms=3_000)
    assert newest == store.Ack(2_000, 3_000, already=False)
    assert store.ack_tick(led, "j", 2_000, shard=0, fence=F1, now_ms=4_000) == store.Ack(2_000, 3_000, already=True)
    assert store.ack_tick(led, "j", 1_000, shard=0, fence=F1, now_ms=4_000) == store.Ack(1_000, 4_000, already=False)
    with pytest.raises(TickNotFound):
        store.ack_tick(led, "j", 1_500, shard=0, fence=F1, now_ms=4_000)
    with pytest.raises(TickNotFound):
        store.ack_tick(led, "other", None, shard=0, fence=F1, now_ms=4_000)


def test_each_recorded_miss_is_listed_newest_first_by_namespace_and_kept_a_month(led):
    insert(led, "j", SlotState(TickStatus.RUNNING, 5, None, None), slot_ms=0)
    insert(led, "team-a\x1fk", SlotState(TickStatus.RUNNING, 5, None, None), slot_ms=0)
    late = [Judgement(job, 0, DeadlineKind.FINISH, DUE, False) for job in ("j", "team-a\x1fk")]
    store.record_misses(led, {(0, F1): late[:1]}, now_ms=DUE + 5)
    store.record_misses(led, {(0, F1): late[1:]}, now_ms=DUE + 9)
    assert store.recent_misses(led, since_ms=0, namespaces=None, limit=10) == [
        RecordedMiss("team-a\x1fk", 0, "deadline", DUE + 9),
        RecordedMiss("j", 0, "deadline", DUE + 5),
    ]
    assert [m.job_id for m in store.recent_misses(led, since_ms=0, namespaces=frozenset({"default"}), limit=10)] == [
        "j"
    ]
    assert len(store.recent_misses(led, since_ms=0, namespaces=None, limit=1)) == 1
    assert store.recent_misses(led, since_ms=DUE + 6, namespaces=None, limit=10)[0].job_id == "team-a\x1fk"
    # A month later, the next recorded miss deletes the ones older than a month.
    insert(led, "j", SlotState(TickStatus.RUNNING, 5, None, None), slot_ms=1)
    store.record_misses(
        led, {(0, F1): [Judgement("j", 1, DeadlineKind.START, 0, False)]}, now_ms=DUE + 10 + store.MISS_HISTORY_MS
    )
    assert [(m.job_id, m.kind) for m in store.recent_misses(led, since_ms=0, namespaces=None, limit=10)] == [
        ("j", "start_deadline")
    ]
