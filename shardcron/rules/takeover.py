"""What a new leader owes when it takes a shard: a pure plan, applied by the loop.

Inputs are what three queries return (the shard's jobs, each job's last
recorded slot, the ticks left claimed or running) plus the time. Output says
which orphans to re-claim, retry or abandon, which missed slots to run or to
record as skipped, and where each job's schedule continues.

Orphans are rows an older leader left unfinished:
- ``claimed``: written ahead of time, but no executor with side effects starts
  before its row is marked ``running`` (a fenced write), so it provably never
  ran: re-claim it and run it at its slot.
- ``running``: its executor may have run; the retry policy decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from shardcron.model import Job, Overlap, SlotRef, Tick, TickStatus
from shardcron.rules.policies import OrphanAction, plan_catch_up, settle_orphan
from shardcron.rules.triggers import Trigger, slots_between

# At most this many missed slots of one job are caught up (the newest ones); older
# ones in its window are counted and logged. Enumerating stops at SCAN_LIMIT.
MAX_CATCH_UP_SLOTS = 10_000
SCAN_LIMIT = 1_000_000


class Dispatch(NamedTuple):  # one per claimed slot: a tuple, built in C
    slot: SlotRef
    attempt: int  # the attempt about to run (1 for a first run)
    manual: bool = False
    # A missed slot run late. With overlap "skip", it waits for the previous run
    # instead of being skipped, so catch-up "all" runs every missed slot, in turn.
    catch_up: bool = False
    # The job's jitter offset for this slot (jitter.jitter_offset_ms): it starts at
    # slot + offset_ms, and its lateness is measured from there. 0 without jitter.
    offset_ms: int = 0
    # A backfilled slot's own --overlap, in place of the job's (None: the job's, and not a backfill).
    overlap: Overlap | None = None
    # The job definition (shard_run.JobEntry.gen) that claimed it; 0 for every other kind of claim. A start
    # under another gen checks the slot is still the job's (policies.disowned_slot).
    gen: int = 0
    # When the claimer claimed it (ms): a tick's span starts there when tracing is on. 0 for other claims.
    claimed_at_ms: int = 0


@dataclass
class TakeoverPlan:
    reclaim: list[Dispatch] = field(default_factory=list)  # orphans to take over and run
    abandon: list[SlotRef] = field(default_factory=list)  # orphans whose retry budget is spent
    run: list[SlotRef] = field(default_factory=list)  # missed slots to claim and run now
    skip: list[SlotRef] = field(default_factory=list)  # missed slots to record as skipped
    beyond_window: dict[str, int] = field(default_factory=dict)  # missed, older than the window
    resume_after: dict[str, int] = field(default_factory=dict)  # job -> schedule continues after this


def plan_takeover(
    jobs: Iterable[Job],
    triggers: Mapping[str, Trigger],
    last_recorded: Mapping[str, int],
    orphans: Iterable[Tick],
    fence: int,
    now_ms: int,
) -> TakeoverPlan:
    plan = TakeoverPlan()
    by_id = {j.id: j for j in jobs}
    orphan_slots: dict[str, int] = {}
    for t in orphans:
        if t.fence >= fence:
            continue  # ours already (cannot happen for a fresh fence, but harmless)
        job = by_id.get(t.job_id)
        if job is None:
            plan.abandon.append(t.slot)  # its job was deleted meanwhile
            continue
        if t.status is TickStatus.CLAIMED:
            action = OrphanAction.RECLAIM
        else:
            action = settle_orphan(t.status, t.attempt, job.retry, could_have_started=True)
        if action is OrphanAction.ABANDON:
            plan.abandon.append(t.slot)
        else:
            next_attempt = max(1, t.attempt) if action is OrphanAction.RECLAIM else t.attempt + 1
            plan.reclaim.append(Dispatch(t.slot, next_attempt, t.manual, catch_up=True))
        if not t.manual:
            orphan_slots[t.job_id] = max(orphan_slots.get(t.job_id, 0), t.scheduled_at_ms)

    for job in by_id.values():
        if job.paused:
            continue
        after = max(last_recorded.get(job.id, 0), orphan_slots.get(job.id, 0), job.active_since_ms)
        # Only the window matters, so enumerate from its start, not from a months-old tick.
        window_start = max(after, now_ms - job.catchup_window_ms - 1)
        missed = slots_between(triggers[job.id], window_start, now_ms, limit=SCAN_LIMIT)
        if len(missed) > MAX_CATCH_UP_SLOTS:
            plan.beyond_window[job.id] = len(missed) - MAX_CATCH_UP_SLOTS
            missed = missed[-MAX_CATCH_UP_SLOTS:]  # the newest ones matter most
        cu = plan_catch_up(job.catchup, job.catchup_window_ms, missed, now_ms)
        plan.run += [SlotRef(job.id, s) for s in cu.run]
        plan.skip += [SlotRef(job.id, s) for s in cu.skip]
        if cu.beyond_window:
            plan.beyond_window[job.id] = plan.beyond_window.get(job.id, 0) + cu.beyond_window
        plan.resume_after[job.id] = max(after, now_ms)
    return plan
