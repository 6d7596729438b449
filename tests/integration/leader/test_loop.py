"""The Scheduler stepped through time by an injected clock, over a real SQLite store.

No etcd: what is under test (claim, dispatch, overlap, release, re-put) does
not depend on it, so the session is a minimal object with a ``done`` event and
a lease deadline on the same clock. The claim and dispatch threads are not
started; each test moves the clock and runs one step of each loop
(``claim_due``, ``dispatch_due``), so every slot's fate is decided at a
known instant. Executors and the recorder run for real: an http job against
the dev sink, held in flight until the test lets it answer.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from sqlalchemy import event

from shardcron.dev.testing.cluster import wait_until
from shardcron.model import Job, TickStatus
from shardcron.rules.policies import OVERLAP_SKIP_REASON, PAUSED_SKIP_REASON, RESCHEDULED_SKIP_REASON
from shardcron.spec.job import job_from_dict
from shardcron.store import list_ticks, put_job, raise_fence
from shardcron.store.jobs import delete_job, set_paused
from tests.support.stepped_scheduler import FENCE, NODE, T0, HeldSink, Rig, S


def noop(job_id: str = "beat") -> Job:
    return job_from_dict({"id": job_id, "every": "1s"})


def slow(held: HeldSink, job_id: str = "slow") -> Job:
    return job_from_dict(
        {"id": job_id, "every": "1s", "overlap": "skip", "executor": {"kind": "http", "url": held.sink.url + "/held"}}
    )


SKIPPED = (TickStatus.SKIPPED, OVERLAP_SKIP_REASON)
OK = (TickStatus.SUCCEEDED, None)


def test_claim_then_dispatch_at_the_slot(rig):
    r = rig([noop()])
    # Led from T0: the first slot, T0 + 1 s, is claimed a lookahead (1 s) ahead, now.
    assert r.scheduler.claim_due() == 1
    assert {s: st for s, (st, _) in r.ticks("beat").items()} == {1: TickStatus.CLAIMED}
    assert r.scheduler.dispatch_due() == 0, "nothing starts before its slot"
    r.at(T0 + 999)
    assert r.ticks("beat")[1][0] is TickStatus.CLAIMED
    r.at(T0 + 1 * S)  # due: it runs, and the next slot is claimed
    assert r.ticks("beat") == {1: OK, 2: (TickStatus.CLAIMED, None)}
    for k in (2, 3, 4):
        r.at(T0 + k * S)
    assert r.ticks("beat") == {1: OK, 2: OK, 3: OK, 4: OK, 5: (TickStatus.CLAIMED, None)}
    assert r.scheduler.stats.snapshot()["by_status"] == {"succeeded": 4}


def test_overlap_skips_only_while_a_run_is_in_flight(rig, held):
    r = rig([slow(held)])
    r.at(T0)
    r.at(T0 + 1 * S)
    wait_until(lambda: held.calls("slow") == [T0 + S], 30, what="the first run to reach the sink")
    r.wait_status("slow", 1, TickStatus.RUNNING)
    r.at(T0 + 2 * S)
    assert r.ticks("slow")[2] == SKIPPED
    held.let_go()
    r.wait_status("slow", 1, TickStatus.SUCCEEDED)
    wait_until(lambda: r.scheduler.in_flight(0) == 0, 30, what="the worker to count its run as over")
    r.at(T0 + 3 * S)
    r.wait_status("slow", 3, TickStatus.SUCCEEDED)
    assert held.calls("slow") == [T0 + S, T0 + 3 * S]


@pytest.mark.parametrize("change", ["put again", "delete and put again", "pause and resume"])
def test_a_job_changed_mid_run_keeps_its_run_counted_and_runs_after_it(rig, held, engine, change):
    """Issue 10's bug: the new definition must see the old one's run while it goes on, and not after."""
    r = rig([slow(held)])
    r.at(T0)
    r.at(T0 + 1 * S)
    wait_until(lambda: held.calls("slow") == [T0 + S], 30, what="the first run to reach the sink")
    changed_at = T0 + 1500
    r.clock.now_ms = changed_at
    job = replace(r.jobs["slow"], labels={"changed": "yes"})
    if change == "put again":
        r.put_again(job, changed_at)
    elif change == "delete and put again":
        delete_job(engine, "slow", shard=0, fence=FENCE)
        r.scheduler.remove_job(0, "slow")
        r.put_again(job, changed_at)
    else:
        paused = set_paused(engine, "slow", True, shard=0, fence=FENCE, node_id=NODE, now_ms=changed_at)
        r.scheduler.upsert_job(0, paused)
        resumed = set_paused(engine, "slow", False, shard=0, fence=FENCE, node_id=NODE, now_ms=changed_at)
        r.scheduler.upsert_job(0, resumed)

    r.at(T0 + 2 * S)
    assert r.ticks("slow")[2] == SKIPPED, "the first run is still going: the changed job waits for it"
    held.let_go()
    r.wait_status("slow", 1, TickStatus.SUCCEEDED)
    wait_until(lambda: r.scheduler.in_flight(0) == 0, 30, what="the worker to count its run as over")
    for k in (3, 4, 5):
        r.at(T0 + k * S)
        r.wait_status("slow", k, TickStatus.SUCCEEDED)
    assert held.calls("slow") == [T0 + S, T0 + 3 * S, T0 + 4 * S, T0 + 5 * S]


def test_release_waits_for_the_run_in_flight_then_claims_and_starts_nothing(rig, held):
    r = rig([slow(held), noop()])
    r.at(T0)
    r.at(T0 + 1 * S)
    wait_until(lambda: held.calls("slow") == [T0 + S], 30, what="the first run to reach the sink")
    released = threading.Event()
    r.scheduler.release(0, 30, released.set)
    r.at(T0 + 2 * S)  # claimed at 1 s, due now: not started, the shard is being handed over
    assert not released.is_set(), "the release waits for the run in flight"
    held.let_go()
    assert released.wait(30)
    assert r.scheduler.led_shards() == []
    r.at(T0 + 3 * S)
    r.at(T0 + 4 * S)
    beat, slow_ticks = r.ticks("beat"), r.ticks("slow")
    assert beat == {1: OK, 2: (TickStatus.CLAIMED, None)}, "claimed before the release, left for the next leader"
    assert slow_ticks == {1: OK, 2: (TickStatus.CLAIMED, None)}
    assert r.scheduler.stats.snapshot()["not_started"] == 2


def test_a_lease_that_ends_while_the_running_mark_is_written_starts_nothing(rig, held, engine):
    """The start guard is checked again after the mark's round trip (runner.run_tick)."""
    r = rig([slow(held)], lease_s=1.8)  # valid until T0 + 1.8 s

    @event.listens_for(engine, "after_cursor_execute")
    def slow_mark(conn, cursor, statement, parameters, context, executemany):
        # The running mark sets status, attempt and start; a result also sets finished_at_ms.
        if statement.startswith("UPDATE ticks SET status") and "finished_at_ms" not in statement:
            r.clock.now_ms = T0 + 2 * S  # the mark took a second: the lease ran out meanwhile

    r.at(T0)
    r.at(T0 + 1 * S)
    r.wait_status("slow", 1, TickStatus.RUNNING)
    assert r.scheduler.recorder.flush(0, 30)
    wait_until(lambda: r.scheduler.stats.snapshot()["not_started"] == 1, 30, what="the run to be given up")
    assert held.calls("slow") == [], "marked running, but the executor never started"


@pytest.mark.parametrize("change", ["delete", "put again"])
def test_a_slot_claimed_while_its_job_changed_is_settled_not_left_claimed(rig, engine, monkeypatch, change):
    """The job is deleted (or replaced) while the claim transaction is in flight: the store has the row
    claimed, the loop's entry is gone or newer. The row must still end final, not stay claimed."""
    from shardcron.leader import loop as loop_module

    r = rig([noop()])
    real_claim = loop_module.tick_store.claim_ticks_many

    def claim_then_change(*args, **kwargs):
        out = real_claim(*args, **kwargs)
        if change == "delete":
            delete_job(engine, "beat", shard=0, fence=FENCE)
            r.scheduler.remove_job(0, "beat")
        else:
            r.put_again(replace(noop(), labels={"v": "2"}), T0)
        return out

    monkeypatch.setattr(loop_module.tick_store, "claim_ticks_many", claim_then_change)
    assert r.scheduler.claim_due() == 1
    monkeypatch.setattr(loop_module.tick_store, "claim_ticks_many", real_claim)
    assert r.ticks("beat")[1][0] is TickStatus.CLAIMED
    r.at(T0 + 1 * S)
    expected = (TickStatus.SKIPPED, "job deleted before its slot") if change == "delete" else OK
    wait_until(lambda: r.ticks("beat")[1] == expected, 30, what=f"slot 1 to end {expected}")


# -- jitter ----------------------------------------------------------------------------------------


def _jittered(job_id: str = "jit") -> Job:
    return job_from_dict({"id": job_id, "every": "10s", "jitter": "9s"})


def _started_at(r: Rig, job_id: str, slot_ms: int) -> int | None:
    assert r.scheduler.recorder.flush(0, 30)
    return {t.scheduled_at_ms: t.started_at_ms for t in list_ticks(r.engine, job_id)}.get(slot_ms)


def test_a_jittered_slot_is_claimed_a_lookahead_before_its_slot_and_starts_at_slot_plus_offset(rig):
    from shardcron.rules.jitter import jitter_offset_ms

    r = rig([_jittered()])
    late = []
    r.scheduler._observe_lateness = lambda shard, lateness_ms, count=1: late.extend([lateness_ms] * count)
    for k in (1, 2, 3):
        slot = T0 + 10 * k * S
        off = jitter_offset_ms("jit", slot, 9 * S)
        r.at(slot - S)  # the claim: a lookahead before the slot, not before the jittered start
        assert r.ticks("jit")[10 * k] == (TickStatus.CLAIMED, None)
        r.at(slot + off - 1)
        assert r.ticks("jit")[10 * k] == (TickStatus.CLAIMED, None), "nothing starts before slot + offset"
        r.at(slot + off)
        assert r.ticks("jit")[10 * k] == OK and _started_at(r, "jit", slot) == slot + off
    assert len({jitter_offset_ms("jit", T0 + 10 * k * S, 9 * S) for k in (1, 2, 3)}) > 1
    assert late == [0, 0, 0], "lateness is measured from slot + offset, and each started right then"


def test_a_tick_that_comes_due_while_a_burst_starts_starts_within_the_burst_not_after_it(rig):
    """A burst of 300 starts at one millisecond, and a jittered tick due while it goes on: every read of
    the clock moves it 20 ms, so the burst spans 6 s of the test's wall time. The dispatcher looks for
    newly due ticks between parts of the burst (a flood's burst must not make another namespace late)."""
    from shardcron.rules.jitter import jitter_offset_ms

    slot = T0 + 10 * S
    jit = next(
        j for j in (_jittered(f"jit-{i}") for i in range(200)) if 2 * S <= jitter_offset_ms(j.id, slot, 9 * S) <= 4 * S
    )
    offset = jitter_offset_ms(jit.id, slot, 9 * S)
    burst = [job_from_dict({"id": f"b{i:03}", "every": "10s"}) for i in range(300)]
    r = rig(burst + [jit])
    r.at(slot - S)  # the claims, a lookahead early
    r.clock.step_ms = 20
    r.at(slot)
    r.clock.step_ms = 0
    r.at(r.clock.now_ms)  # whatever the burst left due starts now, after it
    burst_starts = sorted(_started_at(r, j.id, slot) for j in burst)
    jit_start = _started_at(r, jit.id, slot)
    assert None not in burst_starts and jit_start is not None
    assert jit_start >= slot + offset, "nothing starts before its slot and offset"
    assert jit_start < burst_starts[-1], (
        f"the tick due at +{offset} ms started at +{jit_start - slot} ms, after the whole burst "
        f"(+{burst_starts[0] - slot} to +{burst_starts[-1] - slot} ms)"
    )
    assert all(r.ticks(j.id)[10] == OK for j in burst + [jit])


def test_a_reclaimed_jittered_orphan_waits_for_its_offset_and_a_late_one_starts_at_once(engine):
    from shardcron.rules.jitter import jitter_offset_ms
    from shardcron.store.ticks import SlotClaim, claim_ticks

    # An older leader (fence 5) claimed two slots and died: T0 - 10 s (its jittered start has
    # passed, so it is late: start now) and T0 + 10 s (still ahead: wait for slot + offset).
    job = _jittered()
    raise_fence(engine, 0, 5, "old", T0 - 60 * S)
    put_job(engine, job, shard=0, fence=5, node_id="old", now_ms=T0 - 60 * S)
    early, ahead = T0 - 10 * S, T0 + 10 * S
    claim_ticks(
        engine, [SlotClaim("jit", early), SlotClaim("jit", ahead)], shard=0, fence=5, node_id="old", now_ms=T0 - 11 * S
    )
    r = Rig(engine, [])
    try:
        r.at(T0)
        assert r.ticks("jit")[-10] == OK and _started_at(r, "jit", early) == T0
        off = jitter_offset_ms("jit", ahead, 9 * S)
        r.at(ahead + off - 1)
        assert r.ticks("jit")[10] == (TickStatus.CLAIMED, None)
        r.at(ahead + off)
        assert r.ticks("jit")[10] == OK and _started_at(r, "jit", ahead) == ahead + off
    finally:
        r.close()


def test_a_slot_its_dead_leader_claimed_before_the_job_was_paused_is_skipped_not_run(engine):
    """The old leader claimed the slot a lookahead early, the job was paused (the pause answered before the
    slot), then the shard changed hands: the new leader must not run it (soak seed 30 found it run)."""
    from shardcron.store.ticks import SlotClaim, claim_ticks

    job = job_from_dict({"id": "paused-late", "every": "10s", "executor": {"kind": "noop"}})
    raise_fence(engine, 0, 5, "old", T0 - 60 * S)
    put_job(engine, job, shard=0, fence=5, node_id="old", now_ms=T0 - 60 * S)
    ahead = T0 + 10 * S
    claim_ticks(engine, [SlotClaim(job.id, ahead)], shard=0, fence=5, node_id="old", now_ms=ahead - S)
    put_job(engine, replace(job, paused=True), shard=0, fence=5, node_id="old", now_ms=ahead - S // 2)
    r = Rig(engine, [])
    try:
        r.at(T0)
        r.at(ahead)
        assert r.ticks(job.id)[10] == (TickStatus.SKIPPED, PAUSED_SKIP_REASON)
    finally:
        r.close()


def left_by_a_dead_leader(engine, job: Job, last_ms: int) -> None:
    """An old leader (fence 5) put ``job`` a minute before T0, recorded its slot ``last_ms`` and died."""
    from shardcron.model import ExecutionResult, SlotRef
    from shardcron.store.tick_results import record_results
    from shardcron.store.ticks import SlotClaim, claim_ticks

    raise_fence(engine, 0, 5, "old", T0 - 60 * S)
    put_job(engine, job, shard=0, fence=5, node_id="old", now_ms=T0 - 60 * S)
    claim_ticks(engine, [SlotClaim(job.id, last_ms)], shard=0, fence=5, node_id="old", now_ms=last_ms - S)
    record_results(
        engine,
        [(SlotRef(job.id, last_ms), 1, ExecutionResult(True, last_ms, last_ms), TickStatus.SUCCEEDED)],
        shard=0,
        fence=5,
    )


def test_missed_jittered_slots_caught_up_by_a_new_leader_start_at_once_and_the_slot_at_now_waits(engine):
    from shardcron.rules.jitter import jitter_offset_ms

    # The old leader (fence 5) last recorded T0 - 30 s and died; T0 - 20 s, T0 - 10 s and T0 are
    # owed. The first two are past their jittered start (offsets < 9 s): late, they start at once.
    # T0 itself starts at T0 + its offset, as it would have under the old leader.
    left_by_a_dead_leader(engine, _jittered(), T0 - 30 * S)
    r = Rig(engine, [])
    try:
        r.at(T0)
        got = r.ticks("jit")
        assert got[-20] == OK and got[-10] == OK and got[0] == (TickStatus.CLAIMED, None)
        assert _started_at(r, "jit", T0 - 20 * S) == T0 and _started_at(r, "jit", T0 - 10 * S) == T0
        off = jitter_offset_ms("jit", T0, 9 * S)
        r.at(T0 + off - 1)
        assert r.ticks("jit")[0] == (TickStatus.CLAIMED, None)
        r.at(T0 + off)
        assert r.ticks("jit")[0] == OK and _started_at(r, "jit", T0) == T0 + off
    finally:
        r.close()


def test_a_live_slot_waits_behind_unstarted_catch_up_slots_and_is_judged_at_its_turn(engine, held):
    """Overlap means started: the live slot is not skipped while the catch-up slots ahead of it have
    not started; they start one at a time, in slot order, and the live slot is judged after them."""
    from shardcron.audit import find_false_overlap

    job = slow(held)
    left_by_a_dead_leader(engine, job, T0 - 3 * S)  # T0 - 2 s, T0 - 1 s and T0 are owed
    r = Rig(engine, [])
    try:
        r.at(T0)  # the first catch-up slot starts (and is held); the others wait their turn
        wait_until(lambda: held.calls("slow") == [T0 - 2 * S], 30, what="the first catch-up run to reach the sink")
        r.at(T0 + S)  # the live slot T0 + 1 s is due while T0 - 1 s and T0 have not started
        assert {s: st for s, (st, _) in r.ticks("slow").items()} == {
            -3: TickStatus.SUCCEEDED,
            -2: TickStatus.RUNNING,
            -1: TickStatus.CLAIMED,
            0: TickStatus.CLAIMED,
            1: TickStatus.CLAIMED,
            2: TickStatus.CLAIMED,
        }
        held.let_go()
        step = iter(range(T0 + S + 1, T0 + 2 * S))  # the line moves as runs end; each step starts what came due

        def live_slot_settled() -> bool:
            r.at(next(step))
            return r.ticks("slow")[1][0] in (TickStatus.SUCCEEDED, TickStatus.SKIPPED)

        wait_until(live_slot_settled, 30, what="the live slot's turn")
        got = r.ticks("slow")
        assert [got[s][0] for s in (-2, -1, 0)] == [TickStatus.SUCCEEDED] * 3
        assert held.calls("slow")[:3] == [T0 - 2 * S, T0 - S, T0], "catch-up slots start in slot order"
        rows = {t.scheduled_at_ms: t for t in list_ticks(engine, "slow")}
        assert rows[T0 - S].started_at_ms <= rows[T0].started_at_ms <= rows[T0 + S].finished_at_ms
        if got[1] == SKIPPED:  # T0's run was still going at the live slot's turn: a true overlap
            assert rows[T0].finished_at_ms >= rows[T0 + S].finished_at_ms
        assert find_false_overlap(rows.values()) == []
    finally:
        r.close()


def test_a_run_waiting_out_its_retry_backoff_is_going_and_its_row_keeps_its_first_start(rig, held, engine):
    """A slot between attempts has started and not finished: the next slot is skipped, and the row's
    ``started_at_ms`` stays its first attempt's start, so the audit sees the skip explained."""
    from shardcron.audit import find_false_overlap

    held.let_go()
    job = job_from_dict(
        {
            "id": "flaky",
            "every": "1s",
            "overlap": "skip",
            "retry": {"max_attempts": 2, "backoff": "1s"},
            "executor": {"kind": "http", "url": held.sink.url + "/status/500"},
        }
    )
    r = rig([job])
    r.at(T0)
    r.at(T0 + S)  # attempt 1 fails at once; attempt 2 comes a second of backoff later
    wait_until(lambda: held.calls("flaky") == [T0 + S], 30, what="the first attempt to reach the sink")
    r.at(T0 + 2 * S)
    assert r.ticks("flaky")[2] == SKIPPED
    r.wait_status("flaky", 1, TickStatus.FAILED)
    assert held.calls("flaky") == [T0 + S, T0 + S], "two attempts"
    rows = {t.scheduled_at_ms: t for t in list_ticks(engine, "flaky")}
    assert rows[T0 + S].started_at_ms == T0 + S and rows[T0 + S].attempt == 2
    assert find_false_overlap(rows.values()) == []


@pytest.mark.parametrize("change", ["pause", "new schedule", "same schedule"])
def test_a_slot_claimed_before_its_job_changed_runs_only_if_the_job_still_owes_it(rig, engine, change):
    """Claimed a lookahead early, then the job is paused or given a schedule without that slot before it is
    due: the caller was told the job no longer runs then, so the slot is recorded skipped, not run. A re-put
    that keeps the slot (a label) runs it."""
    r = rig([noop()])
    r.at(T0)  # claims slot 1, due a second later
    assert r.ticks("beat")[1][0] is TickStatus.CLAIMED
    if change == "pause":
        r.scheduler.upsert_job(0, set_paused(engine, "beat", True, shard=0, fence=FENCE, node_id=NODE, now_ms=T0 + 500))
        expected = (TickStatus.SKIPPED, PAUSED_SKIP_REASON)
    elif change == "new schedule":  # every 2 s: T0 is a whole 2 s, T0 + 1 s is no slot of it
        r.put_again(job_from_dict({"id": "beat", "every": "2s"}), T0 + 500)
        expected = (TickStatus.SKIPPED, RESCHEDULED_SKIP_REASON)
    else:
        r.put_again(replace(noop(), labels={"v": "2"}), T0 + 500)
        expected = OK
    r.at(T0 + 1 * S)
    wait_until(lambda: r.ticks("beat")[1] == expected, 30, what=f"slot 1 to end {expected}")


# -- a job changed while its claims were behind (rules/left_owed.py) ---------------------------------------


@pytest.mark.parametrize("change", ["delete", "pause", "new schedule"])
def test_slots_owed_when_a_job_changes_behind_its_claims_are_recorded_not_lost(rig, engine, change):
    """The claimer stalls (a store cut holds its claim) while a 1 s job's slots fall due; then the job is
    deleted, paused or given a new schedule. The old definition's due, unclaimed slots must each end with
    a row: skipped for a deleted or paused job, run when the new definition starts after them. (Before,
    they were dropped with the old definition: runs missed silently. The nemesis soak found it.)"""
    r = rig([noop()])
    r.at(T0 + 1 * S)  # slot 1 runs, slot 2 is claimed
    r.at(T0 + 2 * S)  # slot 2 runs, slot 3 is claimed
    changed_at = T0 + 6 * S + 500
    r.clock.now_ms = changed_at  # 4.5 s pass with no claim and no start: slots 4, 5 and 6 fall due unclaimed
    if change == "delete":
        delete_job(engine, "beat", shard=0, fence=FENCE)
        r.scheduler.remove_job(0, "beat")
        owed = (TickStatus.SKIPPED, "job deleted before its slot")
    elif change == "pause":
        r.scheduler.upsert_job(
            0, set_paused(engine, "beat", True, shard=0, fence=FENCE, node_id=NODE, now_ms=changed_at)
        )
        owed = (TickStatus.SKIPPED, PAUSED_SKIP_REASON)
    else:  # every 2 s from the put: the old slots up to the put are the old definition's, and run late
        r.put_again(job_from_dict({"id": "beat", "every": "2s"}), changed_at)
        owed = OK
    r.at(T0 + 7 * S)
    expected = {1: OK, 2: OK, **{slot: owed for slot in (3, 4, 5, 6)}}
    wait_until(
        lambda: {s: v for s, v in r.ticks("beat").items() if s <= 6} == expected, 30, what=f"slots 1-6 {expected}"
    )
    assert r.scheduler.stats.snapshot()["claimed"] >= 6
