"""The node's notifier: claims owed notifications under each led shard's fence, then sends them.

One task on the node's loop decides when to look, its passes (store reads and fenced claims) on a pool; a few
sender threads send. Where the work comes from:

- **live**: the recorder tells it of every result that landed (``Recorder.listeners``); a failed one
  owes ``on_failure``; a succeeded one of a job it has seen fail owes ``on_recovery`` when the job's
  previous run failed (one primary-key read); and the deadline watch tells it of every deadline a slot
  missed (``DeadlineWatch.listeners``), which owes a notification of that deadline's kind;
- **takeover sweep**, once per (shard, fence) this node comes to lead: the shard's failed slots of the
  last ``LOOKBACK_MS`` without an on_failure row, the recoveries of the jobs among them, the deadlines
  recorded missed without their notification row, and every notification claimed but not settled. So a leader killed between a failed result and its claim, or
  between a claim and its send, leaves nothing owed behind: its successor claims or sends it.

Every claim and every outcome is a fenced write (``store/notifications.py``); a sender checks, before
each attempt, that the shard is still led here and the lease provably held, like a tick.

The guarantee: every owed notification is claimed once (the row's key) and sent at least once; it is
sent twice only when its sender died, or lost the shard, after sending and before recording
``sent``. Each carries ``Idempotency-Key: <job>:<slot>:<kind>`` (``notification_context.py``), the same every time,
so a receiver that keeps the keys it has seen acts exactly once (``shardcron.consumer`` does that).

Why a task and not a thread: a node with nothing failing owes no notification, and the notifier's only
work then is to notice a new leadership (an in-memory look, every ``poll_s``) and, every ``RESEND_CHECK_S``,
to look for claims left unsent. So it waits on the loop (``runtime.pass_task``), at no thread's cost, and
hands a pass to the pool it is given (a node's: its background passes' turn on the API's workers) only when
one is owed: results landed, a leadership not yet swept, or the resend check due. A pass never runs on the
loop: it blocks on the store.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import Executor, ThreadPoolExecutor

from shardcron import metrics
from shardcron.errors import FencedOut, StoreUnavailable
from shardcron.leader.notification_context import NotificationContext, event, with_event_body
from shardcron.model import Job, TickStatus
from shardcron.rules.deadlines import has_deadlines, lookback_since_ms
from shardcron.rules.notification_rate import DEFAULT_RATE, Rate
from shardcron.rules.notifications import (
    FAILED_STATUSES,
    NO_DEFAULTS,
    Defaults,
    NotificationKind,
    NotificationStatus,
    gives_up,
    owed_kind,
    retry_after_ms,
    target_for,
    wants,
)
from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import NodeLoop
from shardcron.runtime.pass_task import PassTask
from shardcron.spec.notifications import parse_table, to_table
from shardcron.store import deadlines as deadline_store
from shardcron.store import notifications as store
from shardcron.store.notifications import NotificationClaim, NotificationRow
from shardcron.store.tick_reads import list_ticks, ticks_between

log = logging.getLogger(__name__)

LOOKBACK_MS = 3_600_000  # how far back a new leader looks for failed slots left without a notification
SEND_ATTEMPTS = 3
SEND_BACKOFF_S = (1.0, 3.0)  # before the second and the third attempt
SEND_TIMEOUT_S = 30.0
RESEND_CHECK_S = 10.0  # how often claimed-but-unsent rows of led shards are looked for again
POLL_S = 1.0  # the longest the notifier's thread waits for landed results before a pass over its shards
SENDERS = 4


class Notifier:
    """``loop``: the node's, where the notifier waits; ``pool``: where its passes run (a node's background
    lane; None: the loop's default executor)."""

    def __init__(
        self,
        scheduler,
        *,
        loop: NodeLoop,
        pool: Executor | None = None,
        defaults: Defaults = NO_DEFAULTS,
        default_rate: Rate | None = DEFAULT_RATE,
        poll_s: float = POLL_S,
        lifeline: Lifeline = UNWATCHED,
    ):
        self._scheduler = scheduler
        self._engine = scheduler.engine
        self._executors = scheduler.executors
        self._node_id = scheduler.node_id
        self._now_ms = scheduler.now_ms
        self._defaults = defaults
        self._rate = default_rate
        self._poll_s = poll_s
        self._pool = pool
        self._lock = threading.Lock()  # _landed and _sending: the recorder's and the senders' threads share them
        self._landed: list = []  # ResultWrites of failed slots, and succeeded ones of jobs seen failing
        self._missed: list = []  # (shard, fence, Judgement) of deadlines just recorded missed
        self._failing: set[str] = set()  # jobs whose last run seen here failed: a success may be a recovery
        # What the passes keep between them: written by one pass at a time, read by the loop between passes.
        self._swept: set[tuple[int, int]] = set()
        self._next_resend_check = time.monotonic() + RESEND_CHECK_S
        self._sending: set[tuple[str, int, str]] = set()
        self._closing = False
        self._senders = ThreadPoolExecutor(SENDERS, thread_name_prefix="notify")
        self._passes = PassTask("notifier", loop, self._pass, owed=self._owed, lifeline=lifeline)
        scheduler.recorder.listeners.append(self._on_landed)
        scheduler.deadlines.listeners.append(self._on_missed)

    def start(self) -> None:
        self._passes.start(self._pool)

    def close(self) -> None:
        self._closing = True
        self._passes.stop()  # waits for a pass under way
        self._senders.shutdown(wait=False, cancel_futures=True)

    # -- the recorder's thread: keep it cheap (a wake is one write to the loop's pipe) -----------

    def _on_landed(self, writes) -> None:
        # Identity tests: this sees every result the node writes, and an Enum member's hash is Python code.
        failed, abandoned, succeeded = TickStatus.FAILED, TickStatus.ABANDONED, TickStatus.SUCCEEDED
        failing = self._failing
        mine = [
            w
            for w in writes
            if (s := w.status) is failed or s is abandoned or (s is succeeded and failing and w.slot.job_id in failing)
        ]
        if mine:
            with self._lock:
                self._landed.extend(mine)
            self._passes.wake()

    def _on_missed(self, misses) -> None:
        with self._lock:
            self._missed.extend(misses)
        self._passes.wake()

    # -- the loop: whether a pass is owed (in memory, never blocking) ---------------------------

    def _owed(self) -> bool:
        with self._lock:
            landed = bool(self._landed) or bool(self._missed)
        return landed or time.monotonic() >= self._next_resend_check or bool(self._unswept())

    def _unswept(self) -> list:
        """The led shards' leaderships not swept yet (each is, once, by the first pass after its takeover)."""
        runs = (self._scheduler.shard_run(shard) for shard in self._scheduler.led_shards())
        return [run for run in runs if run is not None and (run.shard, run.fence) not in self._swept]

    # -- a pass, on the pool ----------------------------------------------------------------------

    def _pass(self) -> float:
        """Claim and send what is owed; returns when to look again unless results land first."""
        with self._lock:
            landed, self._landed = self._landed, []
            missed, self._missed = self._missed, []
        try:
            if time.monotonic() >= self._next_resend_check:
                led = set(self._scheduler.led_shards())
                self._swept = {key for key in self._swept if key[0] in led}
                self._resend_unsent()
                self._next_resend_check = time.monotonic() + RESEND_CHECK_S
            self._sweep_new_leaderships()
            self._handle(landed)
            self._handle_missed(missed)
        except StoreUnavailable as e:
            log.warning("notifications: store unavailable, trying again: %s", e)
            with self._lock:
                self._landed[:0] = landed
                self._missed[:0] = missed
        except Exception:  # noqa: BLE001 - the only notifier must not die; what is owed stays derivable
            log.exception("notifications: a pass failed; every led shard is swept again for what it left")
            self._swept.clear()  # the sweep re-derives from the store what this pass did not claim
        return self._poll_s

    def _handle(self, landed) -> None:
        by_shard: dict[tuple[int, int], list[NotificationClaim]] = defaultdict(list)
        for w in landed:
            run = self._scheduler.shard_run(w.shard)
            if run is None or run.fence != w.fence:
                continue  # no longer ours: the successor's sweep claims it
            job = _job_of(run, w.slot.job_id)
            if job is None:
                continue
            if w.status is TickStatus.SUCCEEDED:
                self._failing.discard(job.id)
                previous = store.previous_run_status(self._engine, job.id, w.slot.scheduled_at_ms)
            else:
                if wants(job, NotificationKind.ON_RECOVERY, self._defaults):
                    self._failing.add(job.id)  # only then is its next success worth a look
                previous = None
            claim = self._claim_for(job, w.slot.scheduled_at_ms, owed_kind(w.status, previous))
            if claim is not None:
                by_shard[(run.shard, run.fence)].append(claim)
            if w.status in FAILED_STATUSES and job.id in self._failing:
                # Recovery is by slot order: a later slot that already succeeded (this run was slow) recovered.
                later = store.next_run(self._engine, job.id, w.slot.scheduled_at_ms)
                if later is not None and (claim := self._claim_for(job, later[0], owed_kind(later[1], w.status))):
                    by_shard[(run.shard, run.fence)].append(claim)
        for (shard, fence), claims in by_shard.items():
            for claim in claims:
                crashpoints.notify("before_claim", claim.job_id)
            self._claim_and_send(shard, fence, claims)

    def _handle_missed(self, missed) -> None:
        by_shard: dict[tuple[int, int], list[NotificationClaim]] = defaultdict(list)
        for shard, fence, j in missed:
            run = self._scheduler.shard_run(shard)
            if run is None or run.fence != fence:
                continue  # no longer ours: the successor's sweep claims it
            job = _job_of(run, j.job_id)
            if job is not None and (claim := self._claim_for(job, j.scheduled_at_ms, NotificationKind(j.kind.value))):
                by_shard[(shard, fence)].append(claim)
        for (shard, fence), claims in by_shard.items():
            for claim in claims:
                crashpoints.notify("before_claim", claim.job_id)
            self._claim_and_send(shard, fence, claims)

    def _claim_for(self, job: Job, slot_ms: int, kind: NotificationKind | None) -> NotificationClaim | None:
        if kind is None:
            return None
        target = target_for(job, kind, self._defaults)
        if target is None:
            return None
        return NotificationClaim(job.id, slot_ms, kind, target.source, json.dumps(to_table(target.spec)))

    def _sweep_new_leaderships(self) -> None:
        runs = self._unswept()
        wanted = {run.shard: self._wanting(run) for run in runs}
        # A shard none of whose jobs wants a notification owes only what a predecessor claimed and did not
        # send: one read for all such shards (a takeover in a cluster without notifications costs one read).
        quiet = {shard for shard, kinds in wanted.items() if not any(kinds)}
        for row in store.unsent(self._engine, quiet, now_ms=self._now_ms()):
            self._send(row)
        for run in runs:
            if run.shard not in quiet:
                self._sweep(run, *wanted[run.shard])
            self._swept.add((run.shard, run.fence))
            # Once per takeover: from here on, this leadership's failures are notified as they land.
            log.info(
                "shard %d: notifications swept for fence %d",
                run.shard,
                run.fence,
                extra={"shard": run.shard, "fence": run.fence},
            )

    def _wanting(self, run) -> tuple[list[str], list[str], list[str]]:
        """The ids of the shard's jobs that want on_failure notifications, of those that want on_recovery, and
        of those with deadlines whose misses go somewhere."""
        with run.lock:
            jobs = [entry.job for entry in run.jobs.values()]
        on_failure, on_recovery = (
            [j.id for j in jobs if wants(j, kind, self._defaults)]
            for kind in (NotificationKind.ON_FAILURE, NotificationKind.ON_RECOVERY)
        )
        on_deadline = [j.id for j in jobs if has_deadlines(j) and wants(j, NotificationKind.DEADLINE, self._defaults)]
        return on_failure, on_recovery, on_deadline

    def _sweep(self, run, on_failure: list[str], on_recovery: list[str], on_deadline: list[str]) -> None:
        """What a predecessor may have left in a shard whose jobs want notifications: failed slots not claimed,
        recoveries not claimed, missed deadlines not claimed, claims not sent."""
        since = self._now_ms() - LOOKBACK_MS
        claims = []
        now = self._now_ms()
        with_deadlines = {job_id: job for job_id in on_deadline if (job := _job_of(run, job_id)) is not None}
        since_of = {job_id: lookback_since_ms(job, now) for job_id, job in with_deadlines.items()}
        for job_id, slot_ms, deadline in deadline_store.missed_without_notification(self._engine, run.shard, since_of):
            job = _job_of(run, job_id)
            if job is not None and (claim := self._claim_for(job, slot_ms, NotificationKind(deadline.value))):
                claims.append(claim)
        for job_id, slot_ms in store.failed_without_notification(self._engine, run.shard, on_failure, since_ms=since):
            job = _job_of(run, job_id)
            if job is not None and (claim := self._claim_for(job, slot_ms, NotificationKind.ON_FAILURE)):
                claims.append(claim)
        for job_id in store.recently_failed_jobs(self._engine, run.shard, on_recovery, since_ms=since):
            job = _job_of(run, job_id)
            if job is None:
                continue
            self._failing.add(job_id)
            newest = store.previous_run_status(self._engine, job_id, self._now_ms() + 1)
            if newest is TickStatus.SUCCEEDED:
                success_ms = _newest_success(self._engine, job_id, since)
                if success_ms is not None:
                    prev = store.previous_run_status(self._engine, job_id, success_ms)
                    if claim := self._claim_for(job, success_ms, owed_kind(TickStatus.SUCCEEDED, prev)):
                        claims.append(claim)
        unsent = store.unsent(
            self._engine, {run.shard}, now_ms=self._now_ms()
        )  # read first: the predecessor's, not the claims below
        for row in unsent:
            self._send(row)
        self._claim_and_send(run.shard, run.fence, claims)
        if claims or unsent:
            log.info(
                "shard %d: notifications a predecessor left: %d claimed now, %d claimed and not sent",
                run.shard,
                len(claims),
                len(unsent),
                extra={"shard": run.shard, "fence": run.fence},
            )

    def _resend_unsent(self) -> None:
        """Claims of the led shards left unsent (a send that failed, or stopped at the store), in one read."""
        led = {shard for shard in self._scheduler.led_shards() if self._scheduler.shard_run(shard) is not None}
        for row in store.unsent(self._engine, led, now_ms=self._now_ms()):
            self._send(row)

    def _claim_and_send(self, shard: int, fence: int, claims: list[NotificationClaim]) -> None:
        if not claims:
            return
        try:
            rows = store.claim(
                self._engine,
                claims,
                shard=shard,
                fence=fence,
                node_id=self._node_id,
                now_ms=self._now_ms(),
                default_rate=self._rate,
            )
        except FencedOut as e:
            log.warning("shard %d: notifications not claimed, the fence moved: %s", shard, e, extra={"shard": shard})
            return
        for row in rows:
            if row.status is NotificationStatus.SUPPRESSED:
                metrics.notifications.labels(row.kind.value, "suppressed").inc()
                log.warning(
                    "%s of %s@%d suppressed: over the default notification's rate limit",
                    row.kind.value,
                    row.job_id,
                    row.scheduled_at_ms,
                    extra={"shard": shard, "job": row.job_id},
                )
            else:
                self._send(row)

    # -- sending -------------------------------------------------------------------------------

    def _send(self, row: NotificationRow) -> None:
        with self._lock:
            if row.key in self._sending:
                return
            self._sending.add(row.key)
        self._senders.submit(self._send_one, row)

    def _send_one(self, row: NotificationRow) -> None:
        try:
            run = self._scheduler.shard_run(row.shard)
            if run is None:
                return  # not ours now: the shard's leader sends it
            if not store.is_claimed(self._engine, row):
                # Settled since it was read as unsent (by a sender that had just finished): not again.
                return
            spec = parse_table(json.loads(row.spec), row.kind.value)
            assert spec is not None  # a claim is written with its target's spec (_claim_for)
            rows = ticks_between(self._engine, row.scheduled_at_ms, row.scheduled_at_ms + 1, row.job_id)
            spec = with_event_body(
                spec, event(row.kind.value, row.job_id, row.scheduled_at_ms, rows[0] if rows else None)
            )
            result, attempts = None, 0
            for attempts in range(1, SEND_ATTEMPTS + 1):
                if run.cancel.is_set():
                    return  # the shard is lost or the lease not provably held: leave it claimed
                ctx = NotificationContext(
                    row.job_id,
                    row.scheduled_at_ms,
                    row.attempts + attempts,
                    run.fence,
                    run.shard,
                    self._node_id,
                    notification=row.kind.value,
                )
                result = self._executors.loop.run(
                    lambda ctx=ctx: self._executors.run(spec, ctx, SEND_TIMEOUT_S, run.cancel), SEND_TIMEOUT_S + 5
                )
                if result.ok or attempts == SEND_ATTEMPTS or run.cancel.wait(SEND_BACKOFF_S[attempts - 1]):
                    break
            if result is None or (not result.ok and run.cancel.is_set()):
                return
            crashpoints.notify("after_send", row.job_id)
            now = self._now_ms()
            attempts += row.attempts  # this round's, after the earlier rounds'
            if not result.ok and not gives_up(row.claimed_at_ms, now):
                wait_ms = retry_after_ms(-(-attempts // SEND_ATTEMPTS))
                store.postpone(
                    self._engine,
                    row,
                    fence=run.fence,
                    node_id=self._node_id,
                    attempts=attempts,
                    error=result.error,
                    next_attempt_at_ms=now + wait_ms,
                )
                metrics.notifications.labels(row.kind.value, "retrying").inc()
                log.warning(
                    "%s of %s@%d failed %d times, trying again in %d s: %s",
                    row.kind.value,
                    row.job_id,
                    row.scheduled_at_ms,
                    attempts,
                    wait_ms // 1000,
                    result.error,
                    extra={"shard": row.shard, "job": row.job_id},
                )
                return
            status = NotificationStatus.SENT if result.ok else NotificationStatus.FAILED
            store.settle(
                self._engine,
                row,
                status,
                fence=run.fence,
                node_id=self._node_id,
                attempts=attempts,
                error=result.error,
                now_ms=now,
            )
            metrics.notifications.labels(row.kind.value, status.value).inc()
            if not result.ok:
                log.warning(
                    "%s of %s@%d given up after %d attempts over a day: %s",
                    row.kind.value,
                    row.job_id,
                    row.scheduled_at_ms,
                    attempts,
                    result.error,
                    extra={"shard": row.shard, "job": row.job_id},
                )
        except FencedOut as e:
            log.warning(
                "%s of %s@%d: outcome not recorded, the fence moved: %s",
                row.kind.value,
                row.job_id,
                row.scheduled_at_ms,
                e,
                extra={"shard": row.shard},
            )
        except StoreUnavailable as e:
            log.warning(
                "%s of %s@%d: store unavailable, it stays claimed and is tried again: %s",
                row.kind.value,
                row.job_id,
                row.scheduled_at_ms,
                e,
                extra={"shard": row.shard},
            )
        except Exception as e:  # noqa: BLE001 - one notification's failure must not stop the others
            if self._closing:  # the node's loop and store are closing under it: expected, and it stays claimed
                log.warning(
                    "%s of %s@%d not sent before the stop; its shard's next leader sends it: %s",
                    row.kind.value,
                    row.job_id,
                    row.scheduled_at_ms,
                    e,
                )
            else:
                log.exception(
                    "%s of %s@%d could not be sent; it stays claimed and is tried again",
                    row.kind.value,
                    row.job_id,
                    row.scheduled_at_ms,
                )
        finally:
            with self._lock:
                self._sending.discard(row.key)


def _job_of(run, job_id: str) -> Job | None:
    with run.lock:
        entry = run.jobs.get(job_id)
    return entry.job if entry is not None else None


def _newest_success(engine, job_id: str, since_ms: int) -> int | None:
    for t in list_ticks(engine, job_id, limit=20):
        if t.scheduled_at_ms <= since_ms:
            return None
        if t.status is TickStatus.SUCCEEDED:
            return t.scheduled_at_ms
    return None
