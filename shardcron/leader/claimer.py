"""The claimer: takes due entries off the claim heap and claims their slots in the store, fenced.

The claim heap holds each job's next slot, due ``lookahead`` before the slot.
Entries due within ``CLAIM_BATCH_MS`` of each other are taken together, and
the slots of every led shard among them are claimed in one fenced
transaction, so the database commit is off the path to the start. The claims
are written by the tick writer (``tick_writer.py``: after the running marks,
before results and prunes), whose ``ClaimStream`` waits on the heap's top. A claimed
slot goes on the dispatch heap (``dispatcher.py``), at the slot plus its
job's jitter offset, and the job's next slot goes back on the claim heap.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from shardcron import metrics
from shardcron.coordination.calendar_book import Unknown
from shardcron.errors import StoreUnavailable
from shardcron.leader.heap import ClaimDue, DispatchDue
from shardcron.leader.scheduler_state import SchedulerState
from shardcron.leader.shard_run import JobEntry, ShardRun
from shardcron.model import Job, SlotRef
from shardcron.rules.calendars import next_allowed
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.left_owed import left_owed, owed_until
from shardcron.rules.takeover import MAX_CATCH_UP_SLOTS, Dispatch
from shardcron.rules.triggers import Trigger
from shardcron.runtime import crashpoints
from shardcron.spec.calendar import Calendar
from shardcron.store import ticks as tick_store
from shardcron.store.ticks import SlotClaim

log = logging.getLogger(__name__)


def _first_allowed_after(trigger: Trigger, calendars: Sequence[Calendar], after_ms: int) -> int | None:
    return next_allowed(trigger, calendars, after_ms).slot_ms


CLAIM_RETRY_MS = 500  # after a store error, claims and starts are retried this soon (slots stay owed)
CLAIM_BATCH_MS = 50  # claim entries due within this of each other are claimed in one transaction


class Claimer(SchedulerState):
    """The ``Scheduler``'s claim side (a base class of it; the state it reads is ``SchedulerState``)."""

    def _push_next_claim(self, run: ShardRun, entry: JobEntry) -> None:
        self._claims.push_many(self._next_claims(run, [entry]))

    def _next_claims(self, run: ShardRun, entries: Iterable[JobEntry]) -> list[ClaimDue]:
        """The claim-heap entries for each job's next slot (none for a paused job or a trigger that has ended)."""
        out = []
        for entry in entries:
            if entry.job.paused:
                continue
            if entry.job.calendars:  # the one check a job without calendars pays
                nxt = self._next_allowed_slot(entry)
            else:
                nxt = entry.trigger.next_after(entry.claimed_through)
            if nxt is not None:
                out.append(ClaimDue(nxt - self.lookahead_ms, run.shard, run.fence, entry.job.id, entry.gen, nxt))
        return out

    def _push_left_owed(self, run: ShardRun, old: JobEntry, new: Job | None) -> None:
        """Claim the slots the job's old definition owed and never claimed (rules/left_owed.py): its
        claims were behind when it was changed to ``new`` (None: deleted)."""
        until = owed_until(old.job, new, self._now_ms())
        if until is None or until <= old.claimed_through:
            return  # the usual case: the claims were not behind
        next_slot = old.trigger.next_after
        if old.job.calendars:
            cals = self.calendars.resolve(old.job.calendars)
            if isinstance(cals, Unknown):
                return  # nothing is owed while one of its calendars does not exist
            next_slot = functools.partial(_first_allowed_after, old.trigger, cals)
        owed = left_owed(next_slot, old.claimed_through, until, MAX_CATCH_UP_SLOTS)
        if not owed.slots:
            return
        log.warning(
            "shard %d: job %s changed with %d%s due slots of its old definition not yet claimed; claiming "
            "them now, each recorded as its start finds it",
            run.shard,
            old.job.id,
            len(owed.slots),
            " (the oldest; more were owed)" if owed.more else "",
            extra={"shard": run.shard, "job": old.job.id},
        )
        now = self._now_ms()
        self._claims.push_many(
            [ClaimDue(now, run.shard, run.fence, old.job.id, old.gen, slot, left_owed=True) for slot in owed.slots]
        )

    def _next_allowed_slot(self, entry: JobEntry) -> int | None:
        """The job's next slot its calendars allow; None while one of them does not exist (nothing is
        owed then; ``calendars_changed`` schedules it again when the calendar is put)."""
        cals = self.calendars.resolve(entry.job.calendars)
        if isinstance(cals, Unknown):
            log.warning("job %s: %s", entry.job.id, cals.reason, extra={"job": entry.job.id})
            return None
        found = next_allowed(entry.trigger, cals, entry.claimed_through)
        if found.first_skipped_ms is not None:
            metrics.calendar_skips.inc()
        return found.slot_ms

    def _calendar_excludes(self, job: Job | None, slot_ms: int) -> str | None:
        """Why the job's calendars exclude the slot now, or None (always None without calendars)."""
        if job is None or not job.calendars:
            return None
        return self.calendars.allows(job.calendars, slot_ms)

    # -- the claim step (the tick writer's second stream: ClaimStream) --------------------

    def claims_due_in_s(self) -> float | None:
        """Seconds until the claim heap's top is due (within ``CLAIM_BATCH_MS``): 0 when it is; None when
        nothing is (or the scheduler is closing)."""
        if self._closing:
            return None
        top: ClaimDue | None = self._claims.top()
        if top is None:
            return None
        return max(0.0, (top.due_ms - CLAIM_BATCH_MS - self._now_ms()) / 1000)

    def claim_due(self) -> int:
        """Claim every slot whose claim is due now; returns how many claim entries were taken."""
        taken, _ = self.claim_pass()
        return taken

    def claim_pass(self) -> tuple[int, StoreUnavailable | None]:
        """Claim every slot whose claim is due now: how many claim entries were taken, and the store's error
        when it was unavailable (those claims are then due again ``CLAIM_RETRY_MS`` later)."""
        due = self._take_due()
        fresh = self._fresh(due)
        return len(due), self._claim_all(fresh) if fresh else None

    def fail_due_claims(self, error: StoreUnavailable) -> None:
        """Every claim due now fails without being tried, and is due again ``CLAIM_RETRY_MS`` later: another
        write has just found the store unavailable (the tick writer's ``on_store_down``)."""
        fresh = self._fresh(self._take_due())
        if fresh:
            self._retry_later(fresh, f"not tried: {error}")

    def _take_due(self) -> list[ClaimDue]:
        # Entries due within CLAIM_BATCH_MS are taken together: one transaction per shard.
        return self._claims.take_due(self._now_ms(), CLAIM_BATCH_MS)

    def _fresh(self, due: list[ClaimDue]) -> dict[tuple[int, int], list[ClaimDue]]:
        """The due entries still worth claiming, per (shard, fence): their shard still led here under that fence,
        and their job's definition still the one that pushed them (or a slot its old definition owed)."""
        by_run: dict[tuple[int, int], list[ClaimDue]] = defaultdict(list)
        for c in due:
            by_run[(c.shard, c.fence)].append(c)
        fresh: dict[tuple[int, int], list[ClaimDue]] = {}
        for (shard, fence), items in by_run.items():
            run = self.led.current(shard, fence)
            if run is None:
                continue  # the shard moved
            with run.lock:  # an entry of an older definition finds a newer gen: a fresher entry exists
                keep = [
                    c for c in items if c.left_owed or ((e := run.jobs.get(c.job_id)) is not None and e.gen == c.gen)
                ]
            if keep:
                fresh[(shard, fence)] = keep
        return fresh

    def _retry_later(self, by_run: dict[tuple[int, int], list[ClaimDue]], why: str) -> None:
        log.warning("claiming %d slots failed (%s); retrying", sum(map(len, by_run.values())), why)
        self._claims.push_again([c for items in by_run.values() for c in items], self._now_ms() + CLAIM_RETRY_MS)

    def _claim_all(self, by_run: dict[tuple[int, int], list[ClaimDue]]) -> StoreUnavailable | None:
        """Claim the due slots of every led shard in one fenced transaction; the store's error when it was
        unavailable (the claims are retried later)."""
        batches = {key: [SlotClaim(c.job_id, c.slot_ms) for c in items] for key, items in by_run.items()}
        claimed_at = self._now_ms()
        try:
            out = tick_store.claim_ticks_many(self.engine, batches, node_id=self.node_id, now_ms=claimed_at)
        except StoreUnavailable as e:
            self._retry_later(by_run, str(e))
            return e
        for (shard, fence), items in by_run.items():
            if out.is_fenced(shard, fence):
                self._fenced(shard, fence, len(items))
                continue
            run = self.led.run_of(shard)
            if run is None or run.fence != fence:
                continue
            got = set(out.written.get(shard, ()))
            self.stats.add(claimed=len(got))
            dispatch, follow = [], []
            judged: list[tuple[Job, int]] = []
            with run.lock:
                for c in items:
                    entry = run.jobs.get(c.job_id)
                    ref = SlotRef(c.job_id, c.slot_ms)
                    if c.left_owed or entry is None or entry.gen != c.gen:
                        # Deleted or replaced while the claim was in flight, or owed by the definition the
                        # job had before. The row is claimed in the store now: dispatched, _start records it
                        # skipped (deleted, paused) or runs it under the new definition; dropped here, it
                        # would stay claimed until a takeover. Not got: the stalled claim wrote it.
                        if ref in got:
                            dispatch.append(
                                DispatchDue(c.slot_ms, shard, fence, Dispatch(ref, 1, claimed_at_ms=claimed_at))
                            )
                        continue
                    entry.claimed_through = max(entry.claimed_through, c.slot_ms)
                    if ref in got:
                        if entry.watch_deadlines:  # the one check a job without deadlines pays
                            judged.append((entry.job, c.slot_ms))
                        if entry.job.jitter_ms:  # the one check a job without jitter pays
                            off = jitter_offset_ms(c.job_id, c.slot_ms, entry.job.jitter_ms)
                            dispatch.append(
                                DispatchDue(
                                    c.slot_ms + off,
                                    shard,
                                    fence,
                                    Dispatch(ref, 1, offset_ms=off, gen=c.gen, claimed_at_ms=claimed_at),
                                )
                            )
                        else:
                            dispatch.append(
                                DispatchDue(
                                    c.slot_ms, shard, fence, Dispatch(ref, 1, gen=c.gen, claimed_at_ms=claimed_at)
                                )
                            )
                    else:
                        log.warning(
                            "shard %d: slot %s@%d was already recorded; not claimed again",
                            shard,
                            c.job_id,
                            c.slot_ms,
                            extra={"shard": shard, "job": c.job_id, "fence": fence},
                        )
                    follow.append(entry)
            self._dispatch.push_many(dispatch)
            self._claims.push_many(self._next_claims(run, follow))
            for job, slot_ms in judged:
                self.deadlines.slots_claimed(shard, fence, job, (slot_ms,))
        return None


class ClaimStream:
    """The claims' stream of the tick writer (``tick_writer.py``): the claim heap is its queue, the heap's
    top its readiness, and ``Claimer.claim_pass`` its batch (what to claim is decided there, under the
    shards' locks; the claim itself is one fenced transaction for every led shard). It fails fast: when
    a write finds the store unavailable, the claims due then fail unattempted and are retried later
    (``fail_queued``), so a claim never waits out another write's timeout and then its own."""

    def __init__(self, claimer: Claimer):
        self._claimer = claimer
        self.wake: Callable[[], None] = lambda: None  # the writer's (tick_writer.py); the heap calls it too

    def ready_at(self, now: float, closing: bool) -> float | None:
        due_in = None if closing else self._claimer.claims_due_in_s()
        return None if due_in is None else now + due_in

    def write_next(self) -> StoreUnavailable | None:
        crashpoints.fail_worker("claimer")  # SHARDCRON_TEST_FAIL_THREAD=claimer fails the writer at this step
        _, store_down = self._claimer.claim_pass()
        return store_down

    def fail_queued(self, error: StoreUnavailable) -> None:
        self._claimer.fail_due_claims(error)

    def closed(self) -> None:
        pass  # the claim heap is the scheduler's: a slot left on it is claimed by the shard's next leader
