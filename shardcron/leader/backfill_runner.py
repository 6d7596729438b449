"""Runs the active backfills of the shards this node leads, at their rate, beside the live schedule.

One thread per led shard that has active backfills, none otherwise. It starts
when the node gains the shard (``Scheduler.acquire``: a successor continues
from the stored cursor) or when a backfill is created on a shard the node
leads, and ends with the shard's run (released or stopped: the ``ShardRun``'s
own lifecycle, no polling of leadership) or when nothing is left to do. A
shard's backfills run one after the other, oldest first.

One step of a backfill, each under the shard's fence:

    plan the next page after the cursor (backfill_plan.backfill_page; rows are
        not read: the claim inserts only slots without a row, so a slot the live
        loop or a former leader recorded meanwhile drops out by the key)
    claim the page's slots; hand each claimed one to the dispatch heap at its
        paced time (slot_not_before_ms), as a start offset from its slot, so its
        lateness is measured from the pace and the live loop's is untouched
    save the cursor and the count done
    wait until the page's last paced start

The page holds about a second of slots at the rate, so a backfill costs its
shard two small transactions a second. The dispatch heap starts backfilled
slots like any other, with the backfill's own ``--overlap`` in place of the
job's. When the range is done the counts are taken again from the ticks
(``backfills.recount``), as a successor does when it takes the backfill over:
exact whatever a failover cut short.

States (``BackfillState``): active -> done (every slot handled) | failed (the
job was deleted). A paused job's backfill waits, active, until it is resumed.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from sqlalchemy.engine import Engine

from shardcron import metrics
from shardcron.coordination.calendar_book import CalendarBook, Unknown
from shardcron.errors import FencedOut, StoreUnavailable
from shardcron.leader.recorder import Recorder
from shardcron.leader.shard_run import ShardRun
from shardcron.model import Backfill, BackfillState, SlotRef
from shardcron.rules.backfill_plan import BackfillRequest, backfill_page, slot_not_before_ms
from shardcron.rules.takeover import Dispatch
from shardcron.store import backfills as backfill_store
from shardcron.store import ticks as tick_store
from shardcron.store.ticks import SlotClaim

log = logging.getLogger(__name__)

PAGE_SECONDS = 1.0  # a page holds this long's worth of slots at the backfill's rate...
MAX_PAGE = 1000  # ...but no more than this many
WAIT_STEP_S = 0.25  # waits are cut into steps this long, each checking that the shard is still ours
RETRY_S = 1.0  # after a store error
SETTLE_S = 30.0  # at the end, how long the final count waits for the last starts and skips to be written


def page_size(rate_per_s: float) -> int:
    """Slots claimed in one step at ``rate_per_s``: about ``PAGE_SECONDS`` of them, 1 to ``MAX_PAGE``."""
    return max(1, min(MAX_PAGE, math.ceil(rate_per_s * PAGE_SECONDS)))


class BackfillHost(Protocol):
    """What the runner needs from the scheduling loop (``loop.Scheduler`` provides it)."""

    engine: Engine
    node_id: str
    calendars: CalendarBook
    recorder: Recorder
    now_ms: Callable[[], int]  # the loop's wall clock, in ms

    def run_of(self, shard: int) -> ShardRun | None:
        """The shard's leadership here, active or not (None when it is not led here)."""
        ...

    def push_dispatch(self, run: ShardRun, d: Dispatch, not_before_ms: int = 0) -> None:
        """Put a claimed slot on the dispatch heap, due at its slot plus offset (or ``not_before_ms``)."""
        ...


@dataclass
class _Worker:
    run: ShardRun
    wake: threading.Event = field(default_factory=threading.Event)  # a backfill was added meanwhile
    thread: threading.Thread | None = None


class BackfillRunner:
    def __init__(self, scheduler: BackfillHost):
        self.scheduler = scheduler
        self.engine = scheduler.engine
        self._workers: dict[int, _Worker] = {}
        self._lock = threading.Lock()
        self._remaining: dict[str, int] = {}  # backfill id -> slots it still owes, on this node
        self._closing = threading.Event()
        metrics.watch_gauge(metrics.backfill_remaining, lambda: sum(list(self._remaining.values())))

    def close(self) -> None:
        self._closing.set()

    # -- what starts a worker ----------------------------------------------------------

    def shard_acquired(self, run: ShardRun) -> None:
        """The node leads ``run.shard`` now: continue its active backfills, if any."""
        if backfill_store.active_backfills(self.engine, run.shard):
            self._ensure(run)

    def backfill_added(self, shard: int) -> None:
        run = self.scheduler.run_of(shard)
        if run is not None and run.active:
            self._ensure(run)

    def _ensure(self, run: ShardRun) -> None:
        with self._lock:
            w = self._workers.get(run.shard)
            if w is not None and w.run is run and w.thread is not None and w.thread.is_alive():
                w.wake.set()
                return
            w = _Worker(run)
            w.thread = threading.Thread(target=self._work, args=(w,), name=f"backfill-{run.shard}", daemon=True)
            self._workers[run.shard] = w
            w.thread.start()

    # -- the worker ----------------------------------------------------------------------

    def _work(self, w: _Worker) -> None:
        run = w.run
        resumed: set[str] = set()  # backfills whose counts this leadership has taken from the ticks
        try:
            while self._may_go_on(run):
                try:
                    active = backfill_store.active_backfills(self.engine, run.shard)
                    if not active:
                        with self._lock:
                            if not w.wake.is_set():
                                if self._workers.get(run.shard) is w:
                                    del self._workers[run.shard]
                                return
                            w.wake.clear()
                        continue
                    bf = active[0]
                    if bf.id not in resumed:
                        resumed.add(bf.id)
                        if bf.cursor_ms is not None or bf.done:  # another leader began it
                            bf = backfill_store.recount(self.engine, bf)
                    self._run_one(run, bf)
                except StoreUnavailable as e:
                    log.warning("shard %d: backfill paused by a store error (%s); retrying", run.shard, e)
                    self._wait_until(run, self.scheduler.now_ms() + int(RETRY_S * 1000))
        except FencedOut:
            log.info("shard %d: backfill stopped: a newer leader holds the shard", run.shard)
        except Exception as e:  # noqa: BLE001 - a bug here must not take the node down
            if self._may_go_on(run):
                log.exception("shard %d: backfill worker crashed", run.shard)
            else:  # the node is stopping or the shard went away under it: the next leader goes on
                log.info("shard %d: backfill stopped with the shard (%s)", run.shard, e)
        finally:
            for backfill_id in resumed:  # what it still owes is the next leader's to report now
                self._remaining.pop(backfill_id, None)
            with self._lock:
                if self._workers.get(run.shard) is w:
                    del self._workers[run.shard]

    def _run_one(self, run: ShardRun, bf: Backfill) -> None:
        """Run ``bf`` from its cursor until its range is done or the shard is no longer ours."""
        s = self.scheduler
        request = BackfillRequest(bf.from_ms, bf.to_ms, bf.rate_per_s, page_size(bf.rate_per_s), bf.overlap)
        started, index, last_start = s.now_ms(), 0, 0
        where = "starting" if bf.cursor_ms is None else f"continuing after slot {bf.cursor_ms}"
        log.info(
            "shard %d: backfill %s of %s: %d of %d slots done, %s",
            run.shard,
            bf.id,
            bf.job_id,
            bf.done,
            bf.planned,
            where,
            extra={"shard": run.shard, "job": bf.job_id},
        )
        while self._may_go_on(run):
            self._remaining[bf.id] = max(0, bf.planned - bf.done)
            with run.lock:
                entry = run.jobs.get(bf.job_id)
            if entry is None:
                self._finish(run, replace(bf, state=BackfillState.FAILED, error="the job was deleted"))
                return
            if entry.job.paused:
                self._wait_until(run, s.now_ms() + int(RETRY_S * 1000))
                continue
            calendars = s.calendars.resolve(entry.job.calendars) if entry.job.calendars else ()
            if isinstance(calendars, Unknown):  # deleted with --force: nothing is owed until it is put again
                self._wait_until(run, s.now_ms() + int(RETRY_S * 1000))
                continue
            page = backfill_page(entry.trigger, calendars, request, (), bf.cursor_ms)
            now = s.now_ms()
            claimed = tick_store.claim_ticks(
                self.engine,
                [SlotClaim(bf.job_id, at) for at in page.slots],
                shard=run.shard,
                fence=run.fence,
                node_id=s.node_id,
                now_ms=now,
            )
            for ref in claimed:
                last_start = slot_not_before_ms(started, index, bf.rate_per_s)
                index += 1
                s.push_dispatch(run, _dispatch(ref, last_start, bf))
            metrics.backfill_slots.inc(len(claimed))
            cursor = page.cursor_ms if page.cursor_ms is not None else bf.to_ms - 1
            bf = replace(bf, cursor_ms=cursor, done=bf.done + len(claimed))
            if page.cursor_ms is None:  # the range is done: count once every slot started or was skipped
                self._wait_until(run, last_start)
                self._wait_all_started(run, bf)
                if not self._may_go_on(run):
                    return
                self._finish(run, replace(backfill_store.recount(self.engine, bf), state=BackfillState.DONE))
                return
            backfill_store.save_progress(self.engine, bf, fence=run.fence, node_id=s.node_id, now_ms=now)
            self._wait_until(run, last_start)

    def _finish(self, run: ShardRun, bf: Backfill) -> None:
        backfill_store.save_progress(
            self.engine, bf, fence=run.fence, node_id=self.scheduler.node_id, now_ms=self.scheduler.now_ms()
        )
        self._remaining.pop(bf.id, None)
        log.info(
            "shard %d: backfill %s of %s %s: %d slots run, %d of them skipped (planned %d)%s",
            run.shard,
            bf.id,
            bf.job_id,
            bf.state.value,
            bf.done,
            bf.skipped,
            bf.planned,
            f": {bf.error}" if bf.error else "",
            extra={"shard": run.shard, "job": bf.job_id},
        )

    def _wait_all_started(self, run: ShardRun, bf: Backfill) -> None:
        """Until no tick ``bf`` wrote is merely claimed (a start or a skip is written by the recorder a
        moment after the dispatcher decides it), or ``SETTLE_S`` passed: the count waits no longer."""
        give_up = self.scheduler.now_ms() + int(SETTLE_S * 1000)
        while self._may_go_on(run) and self.scheduler.now_ms() < give_up:
            self.scheduler.recorder.flush(run.shard, timeout_s=1.0)
            if not backfill_store.unstarted(self.engine, bf):
                return
            run.stop.wait(0.1)

    def _may_go_on(self, run: ShardRun) -> bool:
        return run.active and not self._closing.is_set()

    def _wait_until(self, run: ShardRun, at_ms: int) -> None:
        """Sleep until ``at_ms`` by the scheduler's clock, in steps, while the shard is still ours."""
        while self._may_go_on(run):
            left_s = (at_ms - self.scheduler.now_ms()) / 1000
            if left_s <= 0:
                return
            run.stop.wait(min(left_s, WAIT_STEP_S))


def _dispatch(ref: SlotRef, start_ms: int, bf: Backfill) -> Dispatch:
    """A backfilled slot starts at its paced time (its offset from the slot), under the backfill's overlap."""
    return Dispatch(ref, 1, offset_ms=max(0, start_ms - ref.scheduled_at_ms), overlap=bf.overlap)


__all__ = ["MAX_PAGE", "PAGE_SECONDS", "BackfillHost", "BackfillRunner", "page_size"]
