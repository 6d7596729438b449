"""The node's scheduling loop: one timer heap over every job of every led shard.

Two heaps, two threads, no thread or task per job:

- the **claim heap** holds each job's next slot, due ``lookahead`` before the
  slot. When entries come due, the slots of one shard are claimed together in
  one fenced transaction, so the database commit is off the path to the start;
- the **dispatch heap** holds claimed slots, due at the slot itself. At that
  moment the tick starts, after the guard (shard still ours, lease provably
  held). A noop tick completes inline; others go to a worker pool
  (``runner.run_tick``), which marks the row running under the fence first.

Results are written in batches by the ``Recorder``. The coordinator calls
``acquire`` when this node wins a shard and ``release`` when it hands one over.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from sqlalchemy.engine import Engine

from shardcron import clock, metrics
from shardcron.coordination.session import Session
from shardcron.errors import StoreUnavailable, TriggerBusy
from shardcron.model import ExecutionResult, ExecutorKind, Job, SlotRef, TickStatus
from shardcron.scheduling.policies import overlap_allows
from shardcron.scheduling.recorder import Recorder, ResultWrite
from shardcron.scheduling.runner import StoreDownBeforeStart, TickRun, run_tick
from shardcron.scheduling.takeover import MAX_CATCH_UP_SLOTS, Dispatch, plan_takeover
from shardcron.scheduling.triggers import Trigger, trigger_for
from shardcron.sharding import shard_for
from shardcron.store import fences as fence_store
from shardcron.store import jobs as job_store
from shardcron.store import ticks as tick_store
from shardcron.store.ticks import SlotClaim

log = logging.getLogger(__name__)

CLAIM_RETRY_MS = 500  # after a store error, claims and starts are retried this soon (slots stay owed)
CATCH_UP_WAIT_MS = 100  # a missed slot waiting for the job's previous run looks again this soon


@dataclass
class JobEntry:
    job: Job
    trigger: Trigger
    gen: int
    running: int = 0
    claimed_through: int = 0  # the latest slot claimed for it by this leadership


@dataclass
class ShardRun:
    """One led shard: its fence, the event that cancels its work, and its jobs."""

    shard: int
    fence: int
    stop: threading.Event
    session: Session
    jobs: dict[str, JobEntry] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: bool = False
    in_flight: int = 0
    idle: threading.Condition = None  # type: ignore[assignment]

    def __post_init__(self):
        self.idle = threading.Condition(self.lock)

    @property
    def active(self) -> bool:
        return not self.released and not self.stop.is_set()


@dataclass
class Stats:
    claimed: int = 0
    started: int = 0
    skipped: int = 0
    abandoned: int = 0
    caught_up: int = 0
    fenced_rejections: int = 0
    not_started: int = 0
    by_status: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        node_id: str,
        shard_count: int,
        *,
        allow_shell: bool = False,
        lookahead_ms: int = 1000,
        on_fenced: Callable[[int, int], None] = lambda shard, fence: None,
        imports: Iterable[Job] = (),
        workers: int = 64,
    ):
        self.engine = engine
        self.node_id = node_id
        self.shard_count = shard_count
        self.allow_shell = allow_shell
        self.lookahead_ms = lookahead_ms
        self._report_fenced = on_fenced
        self.stats = Stats()
        self._lateness_by_shard: dict[int, object] = {}
        self._imports: dict[int, list[Job]] = defaultdict(list)
        for job in imports:
            self._imports[shard_for(job.id, shard_count)].append(job)
        self._runs: dict[int, ShardRun] = {}
        self._seq = itertools.count()
        self._claims: list[tuple] = []  # (claim_at_ms, seq, shard, fence, job_id, gen, slot_ms)
        self._dispatch: list[tuple] = []  # (slot_ms, seq, shard, fence, Dispatch)
        self._claim_cond = threading.Condition()
        self._dispatch_cond = threading.Condition()
        self._closing = False
        self.recorder = Recorder(engine, self._fenced)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tick")
        self._threads = [
            threading.Thread(target=self._claim_loop, name="claimer", daemon=True),
            threading.Thread(target=self._dispatch_loop, name="dispatcher", daemon=True),
        ]

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self.recorder.start()
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._closing = True
        for cond in (self._claim_cond, self._dispatch_cond):
            with cond:
                cond.notify_all()
        for t in self._threads:
            if t.is_alive():  # close() also runs when start-up failed before start()
                t.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.recorder.close()

    # -- ShardWork --------------------------------------------------------------------

    def job_count(self, shard: int) -> int:
        run = self._runs.get(shard)
        return len(run.jobs) if run else 0

    def set_shard_count(self, shard_count: int) -> None:
        imports = [j for jobs in self._imports.values() for j in jobs]
        self.shard_count = shard_count
        self._imports = defaultdict(list)
        for job in imports:
            self._imports[shard_for(job.id, shard_count)].append(job)

    def led_shards(self) -> list[int]:
        return sorted(self._runs)

    def acquire(self, shard: int, fence: int, stop: threading.Event, session: Session) -> None:
        now = clock.wall_ms()
        fence_store.raise_fence(self.engine, shard, fence, self.node_id, now)
        if self._imports.get(shard):
            n = job_store.import_jobs(self.engine, self._imports[shard], shard=shard, fence=fence,
                                      node_id=self.node_id, now_ms=now)
            if n:
                log.info("shard %d: imported %d jobs from the jobs file", shard, n, extra={"shard": shard})
        jobs = job_store.load_shard_jobs(self.engine, shard)
        last = tick_store.last_ticks(self.engine, shard)
        orphans = tick_store.unresolved_ticks(self.engine, shard)
        triggers = {j.id: trigger_for(j.schedule) for j in jobs}
        now = clock.wall_ms()
        plan = plan_takeover(jobs, triggers, last, orphans, fence, now)
        kw = dict(shard=shard, fence=fence)
        if plan.reclaim:
            tick_store.take_over(self.engine, [d.slot for d in plan.reclaim], node_id=self.node_id, **kw)
        if plan.abandon:
            tick_store.abandon_ticks(self.engine, plan.abandon, now_ms=now,
                                     reason="its leader died mid-run and the retry budget is spent", **kw)
            self.stats.abandoned += len(plan.abandon)
        if plan.skip:
            tick_store.skip_ticks(self.engine, [SlotClaim(s.job_id, s.scheduled_at_ms) for s in plan.skip],
                                  node_id=self.node_id, now_ms=now, reason="catch-up policy", **kw)
            self.stats.skipped += len(plan.skip)
        claimed = []
        if plan.run:
            claimed = tick_store.claim_ticks(self.engine, [SlotClaim(s.job_id, s.scheduled_at_ms) for s in plan.run],
                                             node_id=self.node_id, now_ms=now, **kw)
            self.stats.caught_up += len(claimed)
            metrics.caught_up.inc(len(claimed))
        for job_id, count in plan.beyond_window.items():
            log.warning("shard %d: job %s missed %d slots it will not run (older than its catch-up window, or "
                        "past the %d-slot catch-up cap)", shard, job_id, count, MAX_CATCH_UP_SLOTS,
                        extra={"shard": shard, "job": job_id})
        run = ShardRun(shard, fence, stop, session)
        for i, job in enumerate(jobs):
            run.jobs[job.id] = JobEntry(job, triggers[job.id], gen=next(self._seq),
                                        claimed_through=plan.resume_after.get(job.id, now))
        self._runs[shard] = run
        for d in plan.reclaim:
            self._push_dispatch(run, d)
        for s in claimed:
            self._push_dispatch(run, Dispatch(s, 1, catch_up=True))
        for entry in run.jobs.values():
            self._push_next_claim(run, entry)
        log.info("shard %d: leading with fence %d: %d jobs, %d caught up, %d re-claimed, %d skipped, %d abandoned",
                 shard, fence, len(jobs), len(claimed), len(plan.reclaim), len(plan.skip), len(plan.abandon),
                 extra={"shard": shard, "fence": fence})

    def release(self, shard: int, grace_s: float, on_done: Callable[[], None]) -> None:
        run = self._runs.get(shard)
        if run is None:
            on_done()
            return
        with run.lock:
            run.released = True

        def drain():
            with run.lock:
                run.idle.wait_for(lambda: run.in_flight == 0, timeout=grace_s)
                still = run.in_flight
            if still:
                log.warning("shard %d: %d ticks still running after %.1fs; cancelling them", shard, still, grace_s)
                run.stop.set()
            self.recorder.flush(shard, timeout_s=max(grace_s, 1.0))
            if self._runs.get(shard) is run:
                del self._runs[shard]
            on_done()

        if grace_s <= 0:
            run.stop.set()
            if self._runs.get(shard) is run:
                del self._runs[shard]
            on_done()
        else:
            threading.Thread(target=drain, name=f"release-{shard}", daemon=True).start()

    # -- job changes (the API calls these on the shard's leader) ---------------------

    def upsert_job(self, shard: int, job: Job) -> None:
        run = self._runs.get(shard)
        if run is None:
            return
        old = run.jobs.get(job.id)
        # The new definition owes every slot of its own schedule after it took
        # effect; a slot the old one already claimed is simply not claimed again.
        entry = JobEntry(job, trigger_for(job.schedule), gen=next(self._seq),
                         running=old.running if old else 0, claimed_through=job.active_since_ms)
        run.jobs[job.id] = entry
        self._push_next_claim(run, entry)

    def remove_job(self, shard: int, job_id: str) -> None:
        run = self._runs.get(shard)
        if run is not None:
            run.jobs.pop(job_id, None)

    def trigger_now(self, shard: int, job_id: str) -> SlotRef:
        """Run ``job_id`` now as an extra, manual tick recorded like any other."""
        run = self._runs.get(shard)
        if run is None or job_id not in run.jobs:
            raise KeyError(job_id)
        now = clock.wall_ms()
        # A manual tick takes the current millisecond; if a slot already sits
        # there (a scheduled one, or another trigger), the next free one.
        for at in range(now, now + 50):
            got = tick_store.claim_ticks(self.engine, [SlotClaim(job_id, at, manual=True)], shard=shard,
                                         fence=run.fence, node_id=self.node_id, now_ms=now)
            if got:
                self._push_dispatch(run, Dispatch(got[0], 1, manual=True))
                return got[0]
        raise TriggerBusy(job_id, now)

    def oldest_overdue_s(self) -> float:
        """Seconds since the oldest slot that is due but not started (the next-fire watchdog)."""
        now = clock.wall_ms()
        with self._claim_cond:
            claim_top = self._claims[0][6] if self._claims else None
        with self._dispatch_cond:
            dispatch_top = self._dispatch[0][0] if self._dispatch else None
        due = [s for s in (claim_top, dispatch_top) if s is not None and s < now]
        # A second of slack: claims are taken a lookahead early and started on time.
        return max(0.0, (now - min(due)) / 1000.0 - 1.0) if due else 0.0

    # -- heaps --------------------------------------------------------------------------

    def _push_next_claim(self, run: ShardRun, entry: JobEntry) -> None:
        if entry.job.paused:
            return
        nxt = entry.trigger.next_after(entry.claimed_through)
        if nxt is None:
            return
        with self._claim_cond:
            heapq.heappush(self._claims, (nxt - self.lookahead_ms, next(self._seq), run.shard, run.fence,
                                          entry.job.id, entry.gen, nxt))
            self._claim_cond.notify()

    def _push_dispatch(self, run: ShardRun, d: Dispatch, not_before_ms: int = 0) -> None:
        with self._dispatch_cond:
            heapq.heappush(self._dispatch, (max(d.slot.scheduled_at_ms, not_before_ms), next(self._seq), run.shard,
                                            run.fence, d))
            self._dispatch_cond.notify()

    @staticmethod
    def _pop_due(heap: list, cond: threading.Condition, slack_ms: int, closing: Callable[[], bool]) -> list:
        """Wait until the heap's top is due (within ``slack_ms``), then pop everything due."""
        with cond:
            while not closing():
                now = clock.wall_ms()
                if heap and heap[0][0] <= now + slack_ms:
                    due = []
                    while heap and heap[0][0] <= now + slack_ms:
                        due.append(heapq.heappop(heap))
                    return due
                cond.wait(None if not heap else max(0.0, (heap[0][0] - now - slack_ms) / 1000.0))
        return []

    def _current(self, shard: int, fence: int) -> ShardRun | None:
        run = self._runs.get(shard)
        return run if run is not None and run.fence == fence and run.active else None

    # -- claim loop -----------------------------------------------------------------------

    def _claim_loop(self) -> None:
        while not self._closing:
            # Entries due within 50 ms are taken together: one transaction per shard.
            due = self._pop_due(self._claims, self._claim_cond, 50, lambda: self._closing)
            by_shard: dict[tuple[int, int], list[tuple]] = defaultdict(list)
            for item in due:
                _, _, shard, fence, job_id, gen, slot = item
                run = self._current(shard, fence)
                entry = run.jobs.get(job_id) if run else None
                if entry is None or entry.gen != gen:
                    continue  # the shard moved, or the job changed: a fresher entry exists
                by_shard[(shard, fence)].append(item)
            if by_shard:
                self._claim_all(by_shard)

    def _claim_all(self, by_shard: dict[tuple[int, int], list[tuple]]) -> None:
        """Claim the due slots of every led shard in one fenced transaction."""
        batches = {key: [SlotClaim(job_id, slot) for _, _, _, _, job_id, _, slot in items]
                   for key, items in by_shard.items()}
        try:
            out = tick_store.claim_ticks_many(self.engine, batches, node_id=self.node_id, now_ms=clock.wall_ms())
        except StoreUnavailable as e:
            log.warning("claiming %d slots failed (%s); retrying", sum(map(len, batches.values())), e)
            retry_at = clock.wall_ms() + CLAIM_RETRY_MS
            with self._claim_cond:
                for items in by_shard.values():
                    for it in items:
                        heapq.heappush(self._claims, (retry_at,) + it[1:])
            return
        for (shard, fence), items in by_shard.items():
            if shard in out.fenced_out:
                self._fenced(shard, fence, len(items))
                continue
            run = self._runs.get(shard)
            if run is None or run.fence != fence:
                continue
            got = set(out.written.get(shard, ()))
            self.stats.claimed += len(got)
            for it in items:
                _, _, _, _, job_id, gen, slot = it
                ref = SlotRef(job_id, slot)
                entry = run.jobs.get(job_id)
                if entry is None or entry.gen != gen:
                    continue
                entry.claimed_through = max(entry.claimed_through, slot)
                if ref in got:
                    self._push_dispatch(run, Dispatch(ref, 1))
                else:
                    log.warning("shard %d: slot %s@%d was already recorded; not claimed again", shard, job_id, slot,
                                extra={"shard": shard, "job": job_id, "fence": fence})
                self._push_next_claim(run, entry)

    # -- dispatch loop ------------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        while not self._closing:
            due = self._pop_due(self._dispatch, self._dispatch_cond, 0, lambda: self._closing)
            groups: dict[tuple[int, int], list[Dispatch]] = defaultdict(list)  # in slot order of first appearance
            for _, _, shard, fence, d in due:
                groups[(shard, fence)].append(d)
            inline: list[tuple[int, int, Dispatch, int]] = []
            for (shard, fence), ds in groups.items():
                self._start_group(shard, fence, ds, inline)
            # Book-keeping for the ticks that completed inline comes after the whole
            # burst has started, so the last start of a burst waits for no one's records.
            if inline:
                ok = TickStatus.SUCCEEDED
                self.recorder.put_many([ResultWrite(shard, fence, d.slot, d.attempt, ExecutionResult(True, t, t), ok)
                                        for shard, fence, d, t in inline])
                for shard, _, d, t in inline:
                    self._started(shard, t - d.slot.scheduled_at_ms)
                self.stats.by_status[ok.value] += len(inline)

    def _start_group(self, shard: int, fence: int, ds: list[Dispatch], inline: list) -> None:
        """Start one shard's due ticks under one acquisition of the shard's lock.

        The stop event and the session are still checked before every tick: a
        session loss sets the stop event from the keepalive thread, without the
        lock, and must stop a burst half-way.
        """
        run = self._runs.get(shard)
        if run is None or run.fence != fence:
            return
        with run.lock:
            for k, d in enumerate(ds):
                if not run.active or not run.session.can_act():
                    self.stats.not_started += len(ds) - k
                    metrics.not_started.inc(len(ds) - k)
                    return  # the rows stay claimed: whoever leads next re-claims them
                self._start(run, d, inline)

    def _start(self, run: ShardRun, d: Dispatch, inline: list) -> None:
        """One tick, with ``run.lock`` held."""
        entry = run.jobs.get(d.slot.job_id)
        if entry is None:
            self._record(run, d, ExecutionResult(False, clock.wall_ms(), clock.wall_ms(),
                                                 error="job deleted before its slot"), TickStatus.SKIPPED)
            return
        if not d.manual and not overlap_allows(entry.job.overlap, entry.running):
            if d.catch_up:
                self._push_dispatch(run, d, not_before_ms=clock.wall_ms() + CATCH_UP_WAIT_MS)
                return
            self._record(run, d, ExecutionResult(False, clock.wall_ms(), clock.wall_ms(),
                                                 error="overlap policy: the previous run is still going"),
                         TickStatus.SKIPPED)
            return
        if entry.job.executor.kind is ExecutorKind.NOOP:
            # No side effect to guard: it completes here, and the recorder writes it.
            inline.append((run.shard, run.fence, d, clock.wall_ms()))
            return
        run.in_flight += 1
        entry.running += 1
        metrics.running_executors.inc()
        shard, fence = run.shard, run.fence
        tick = TickRun(entry.job, d.slot, d.attempt, shard, fence, self.node_id, run.stop, run.session)

        def work():
            try:
                status = run_tick(tick, self.engine, self.recorder, self.allow_shell,
                                  self._fenced, lambda late: self._started(shard, late))
                if status is None:
                    self.stats.not_started += 1
                    metrics.not_started.inc()
                else:
                    self.stats.by_status[status.value] += 1
            except StoreDownBeforeStart as e:
                log.warning("tick %s@%d: %s; trying again in %d ms", d.slot.job_id, d.slot.scheduled_at_ms, e,
                            CLAIM_RETRY_MS, extra={"shard": shard, "job": d.slot.job_id, "fence": fence})
                if run.active:
                    self._push_dispatch(run, replace(d, attempt=e.attempt),
                                        not_before_ms=clock.wall_ms() + CLAIM_RETRY_MS)
            except Exception:  # noqa: BLE001 - a bug in one tick must not kill the pool
                log.exception("tick %s@%d crashed", d.slot.job_id, d.slot.scheduled_at_ms)
            finally:
                self._done(run, entry)

        self._pool.submit(work)

    def _record(self, run: ShardRun, d: Dispatch, result: ExecutionResult, status: TickStatus) -> None:
        w = ResultWrite(run.shard, run.fence, d.slot, d.attempt, result, status)
        self.recorder.put(w)
        self.stats.by_status[status.value] += 1

    def _started(self, shard: int, lateness_ms: int) -> None:
        self.stats.started += 1
        child = self._lateness_by_shard.get(shard)
        if child is None:  # labels() is costly on the hot path: one child per shard, looked up once
            child = self._lateness_by_shard[shard] = metrics.tick_lateness.labels(str(shard))
        child.observe(max(0, lateness_ms) / 1000.0)

    def _done(self, run: ShardRun, entry: JobEntry) -> None:
        with run.lock:
            run.in_flight -= 1
            entry.running -= 1
            metrics.running_executors.dec()
            run.idle.notify_all()

    def _fenced(self, shard: int, fence: int, count: int = 1) -> None:
        self.stats.fenced_rejections += count
        metrics.fenced_writes.inc(count)
        self._report_fenced(shard, fence)
