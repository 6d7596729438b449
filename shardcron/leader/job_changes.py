"""The API's job changes on a led shard: a job put, removed or triggered, calendars changed.

Each change takes effect on the claim heap: a changed job gets a new
definition (a new ``gen``), and a heap entry of an older one finds the newer
gen and is dropped. A manual trigger claims its slot at once and puts it on
the dispatch heap.
"""

from __future__ import annotations

import logging

from shardcron.errors import JobRunning, TriggerBusy
from shardcron.leader.scheduler_state import SchedulerState
from shardcron.leader.shard_run import JobEntry
from shardcron.model import Job, SlotRef
from shardcron.rules.policies import overlap_allows
from shardcron.rules.takeover import Dispatch
from shardcron.rules.triggers import trigger_for
from shardcron.store import ticks as tick_store
from shardcron.store.ticks import SlotClaim

log = logging.getLogger(__name__)


class JobChanges(SchedulerState):
    """The ``Scheduler``'s side the API calls (a base class of it; the state it reads is ``SchedulerState``)."""

    def upsert_job(self, shard: int, job: Job) -> None:
        run = self.led.run_of(shard)
        if run is None:
            return
        trigger = trigger_for(job.schedule)
        # The new definition owes every slot of its own schedule after it took
        # effect; a slot the old one already claimed is simply not claimed again.
        # Runs of the old definition still going stay on the job's line (run.lines, keyed by job id).
        with run.lock:
            old = run.jobs.get(job.id)
            entry = run.jobs[job.id] = JobEntry(job, trigger, gen=run.next_gen(), claimed_through=job.active_since_ms)
        if old is not None:
            self._push_left_owed(run, old, job)
        self._push_next_claim(run, entry)

    def calendars_changed(self, names: set[str]) -> None:
        """Calendars ``names`` were put or deleted: every led job that names one is scheduled again
        under them, from its last claimed slot (a slot already claimed is re-checked before it starts)."""
        if not names:
            return
        runs = self.led.runs()
        for run in runs:
            with run.lock:
                renewed = []
                for job_id, e in list(run.jobs.items()):
                    if e.job.calendars and not names.isdisjoint(e.job.calendars):
                        # A new gen: the heap entry of the old schedule finds it and is dropped.
                        renewed.append(
                            JobEntry(e.job, e.trigger, gen=run.next_gen(), claimed_through=e.claimed_through)
                        )
                        run.jobs[job_id] = renewed[-1]
            if renewed:
                self._claims.push_many(self._next_claims(run, renewed))
                log.info(
                    "shard %d: %d jobs rescheduled after a change to calendars %s",
                    run.shard,
                    len(renewed),
                    ", ".join(sorted(names)),
                    extra={"shard": run.shard},
                )

    def remove_job(self, shard: int, job_id: str) -> None:
        run = self.led.run_of(shard)
        if run is not None:
            with run.lock:
                old = run.jobs.pop(job_id, None)
            if old is not None:
                self._push_left_owed(run, old, None)

    def trigger_now(self, shard: int, job_id: str) -> SlotRef:
        """Run ``job_id`` now as an extra, manual tick recorded like any other."""
        run = self.led.run_of(shard)
        if run is None:
            raise KeyError(job_id)
        with run.lock:
            entry = run.jobs.get(job_id)
            if entry is None:
                raise KeyError(job_id)
            # Refused now, not recorded skipped later: the caller learns why at once.
            if not overlap_allows(entry.job.overlap, run.runs_of(job_id)):
                raise JobRunning(job_id)
        now = self._now_ms()
        # A manual tick takes the current millisecond; if a slot already sits
        # there (a scheduled one, or another trigger), the next free one.
        for at in range(now, now + 50):
            got = tick_store.claim_ticks(
                self.engine,
                [SlotClaim(job_id, at, manual=True)],
                shard=shard,
                fence=run.fence,
                node_id=self.node_id,
                now_ms=now,
            )
            if got:
                self.push_dispatch(run, Dispatch(got[0], 1, manual=True))
                return got[0]
        raise TriggerBusy(job_id, now)
