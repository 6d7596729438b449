"""The node's control loop: session lifecycle, the cluster mirror, and every shard's state.

One thread runs it. Events arrive on a queue (watch changes, session loss,
shards drained, fenced writes, stop; see events.py); after each batch the loop
asks the pure ``ownership.decide`` what to do for every shard and does it, over
the placement that the pure ``balancer.assign`` gives for the member set that
the pure ``settle`` picks. The only thing that does not wait for this thread is
session loss: its callback sets every shard's stop event directly, so work
stops at once even if the loop is busy.

Voluntary hand-overs are paced: a leader gives a shard to its preferred owner
only while that node has fewer than ``MAX_TAKEOVERS_IN_FLIGHT`` shards won and
not yet ready. A new leader readies its shards one after another (jobs, last
ticks, the plan), so handing it 85 at once would leave the last of them
leaderless for the sum of all the others' takeovers.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from shardcron import clock, metrics
from shardcron.abc import ShardWork
from shardcron.coordination import membership
from shardcron.coordination.election import Election
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.events import (
    Drained, Event, Fenced, SessionLostEvent, Stop, Wake, WatchBroken, WatchChanges,
)
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.ownership import Action, Role, ShardSlot, ShardState, decide, role_of
from shardcron.coordination.placement import Placer, takeovers_in_flight
from shardcron.coordination.session import Session
from shardcron.coordination.view import ClusterView
from shardcron.errors import ConfigError, EtcdUnavailable, FencedOut, SessionLost, StoreUnavailable

log = logging.getLogger(__name__)

JOB_COUNT_PROCLAIM_S = 2.0  # how stale the job counts that `shardcron shards` shows may be
MAX_TAKEOVERS_IN_FLIGHT = 2  # shards a node may have won and not yet readied before it is handed more


@dataclass
class CoordinatorSettings:
    node_id: str
    address: str
    shard_count: int
    ttl_s: int = 10
    settle_s: float = 1.0  # membership changes inside this window are handled as one
    resign_grace_s: float = 5.0  # how long a resigning leader waits for running ticks
    started_at_ms: int = 0
    fence_offset: int = 0  # added to election revisions (see store/epoch.py)


class Coordinator:
    def __init__(self, etcd: Etcd, layout: KeyLayout, settings: CoordinatorSettings, work: ShardWork,
                 verify_etcd: Callable[[], None] = lambda: None):
        self.etcd = etcd
        self.layout = layout
        self.s = settings
        self.work = work
        self._verify_etcd = verify_etcd  # raises ConfigError if etcd is not the cluster the fences came from
        self.view = ClusterView(layout)
        self.view_lock = threading.Lock()  # the control thread writes the mirror; API threads read it
        self.slots = {k: ShardSlot(k) for k in range(settings.shard_count)}
        self.session: Session | None = None
        self.joined = threading.Event()  # set once registered and watching; cleared on session loss
        self.stopped = threading.Event()  # set when run() has returned
        self.crashed = False
        self.fatal: str | None = None
        self._events: queue.Queue = queue.Queue()
        self._stopping = False
        self._cancel_watch: Callable[[], None] | None = None
        self._resync_due = 0.0  # when a failed re-read of the mirror is tried again
        self._placer = Placer(settings.settle_s)
        self._last_proclaim: dict[int, int] = {}
        self._unproclaimed: set[int] = set()  # led shards whose "leader since" etcd has not taken yet
        # What API threads may read: shard -> fence of every shard led here. Replaced whole,
        # under the lock, by the control thread on every change of a slot's state.
        self._fences_lock = threading.Lock()
        self._led_fences: dict[int, int] = {}
        self._next_count_proclaim = 0.0
        self._undecided = True  # an event since the last _reconcile may change what a shard should do
        self._decide_by = 0.0  # re-decide by then even without such events (settle windows, proclaims)

    # -- public -----------------------------------------------------------------

    def request_stop(self) -> None:
        self._events.put(Stop())

    def report_fenced(self, shard: int, fence: int) -> None:
        """Called by the scheduling side when a write under ``fence`` was rejected."""
        self._events.put(Fenced(shard, fence))

    def led_shards(self) -> list[int]:
        """The shards led here (any thread)."""
        with self._fences_lock:
            return sorted(self._led_fences)

    def leader_fence(self, shard: int) -> int | None:
        """The fence this node leads ``shard`` under, or None (any thread)."""
        with self._fences_lock:
            return self._led_fences.get(shard)

    def _set_state(self, slot: ShardSlot, new: ShardState, why: str) -> None:
        """Every change of a slot's state goes through here, so the published fences follow it."""
        slot.set_state(new, why)
        with self._fences_lock:
            led = {k: s.fence for k, s in self.slots.items() if s.state is ShardState.LEADER}
            if led != self._led_fences:
                self._led_fences = led

    def run(self) -> None:
        """Until stopped: open a session, join, keep shards; after a session loss, start over."""
        backoff = 0.5
        try:
            while not self._stopping:
                try:
                    self._open_session()
                    backoff = 0.5
                    self._serve()
                except (EtcdUnavailable, SessionLost) as e:
                    log.warning("coordination interrupted: %s; retrying in %.1fs", e, backoff)
                    self._drop_session(str(e))
                    if self._wait_stop(backoff):
                        break
                    backoff = min(backoff * 2, 5.0)
        except ConfigError as e:
            log.error("refusing to lead any shard: %s", e)
            self.crashed = True
            self.fatal = str(e)
        except Exception:
            # A bug, not a fault we can ride out: stop leading everything and let the
            # node exit non-zero so a supervisor restarts it clean.
            log.exception("coordinator crashed; the node stops")
            self.crashed = True
        finally:
            self._drop_session("node stopping")
            self.stopped.set()

    # -- session ------------------------------------------------------------------

    def _open_session(self) -> None:
        self._verify_etcd()
        session = Session(self.etcd, self.s.ttl_s, name=self.s.node_id)
        self.session = session
        for slot in self.slots.values():
            slot.stop = threading.Event()
            self._set_state(slot, ShardState.IDLE, "new session")
            slot.election = None
        session.on_lost(self._on_session_lost)
        metrics.session_alive.set(1)
        deadline = clock.monotonic() + self.s.ttl_s + 2
        while True:
            try:
                membership.register(self.etcd, self.layout, session, self.s.node_id, self.s.address,
                                    self.s.started_at_ms)
                break
            except ConfigError:
                # A previous incarnation of this node id (killed, restarted fast) holds
                # the key until its lease expires; wait for that, no longer.
                if clock.monotonic() > deadline or self._wait_stop(0.5):
                    raise
        self._resync()
        self.joined.set()
        log.info("joined the cluster as %s (lease %x)", self.s.node_id, session.lease_id)

    def _on_session_lost(self, reason: str) -> None:
        # Runs on the keepalive thread: stop all work now, not when the loop gets to it.
        for slot in self.slots.values():
            slot.stop.set()
        self.joined.clear()
        metrics.session_alive.set(0)
        self._events.put(SessionLostEvent(reason))

    def _drop_session(self, reason: str) -> None:
        self.joined.clear()
        if self._cancel_watch:
            self._cancel_watch()
            self._cancel_watch = None
        for slot in self.slots.values():
            if slot.state in (ShardState.LEADER, ShardState.RESIGNING):
                slot.stop.set()
                self.work.release(slot.shard, 0.0, lambda: None)
            if slot.state is ShardState.LEADER:
                metrics.leader_changes.labels("lost").inc()
            self._set_state(slot, ShardState.LOST, reason)
            slot.election = None
        metrics.shards_led.set(0)
        metrics.session_alive.set(0)
        if self.session:
            session, self.session = self.session, None
            if self._stopping and not session.done.is_set():
                session.close()
            else:
                session.orphan()

    def _resync(self) -> None:
        self._undecided = True
        if self._cancel_watch:
            self._cancel_watch()
        rev, kvs = self.etcd.get_prefix(self.layout.root)
        with self.view_lock:
            self.view.load(rev, kvs)
        self._cancel_watch = self.etcd.watch_prefix(
            self.layout.root, rev + 1,
            lambda r, evs: self._events.put(WatchChanges(r, evs)),
            lambda why: self._events.put(WatchBroken(why)),
        )

    # -- the loop -----------------------------------------------------------------

    def _serve(self) -> None:
        self._reconcile()
        while True:
            timeout = self._next_wakeup()
            try:
                ev = self._events.get(timeout=timeout)
            except queue.Empty:
                ev = Wake()
            batch = [ev]
            while True:
                try:
                    batch.append(self._events.get_nowait())
                except queue.Empty:
                    break
            for ev in batch:
                self._handle(ev)
            if self._resync_due and clock.monotonic() >= self._resync_due:
                self._try_resync()
            if self._stopping and self._all_idle():
                self._leave()
                return
            if self._undecided or clock.monotonic() >= self._decide_by:
                self._reconcile()

    def _handle(self, ev: Event) -> None:
        if isinstance(ev, WatchChanges):
            with self.view_lock:
                decisive = self.view.apply(ev.revision, ev.events)
            self._undecided |= decisive  # a mere re-proclaim changes no decision
            return
        self._undecided = True
        if isinstance(ev, SessionLostEvent):
            raise SessionLost(ev.reason)
        if isinstance(ev, Stop):
            if not self._stopping:
                log.info("stopping: handing every shard over")
            self._stopping = True
        elif isinstance(ev, WatchBroken):
            log.warning("watch on %s broke (%s); re-reading", self.layout.root, ev.reason)
            self._try_resync()
        elif isinstance(ev, Drained):
            if (slot := self.slots.get(ev.shard)) is not None:
                self._finish_resign(slot)
        elif isinstance(ev, Fenced):
            slot = self.slots.get(ev.shard)
            if slot is not None and slot.state is ShardState.LEADER and slot.fence == ev.fence:
                log.error("shard %d: a write under fence %d was rejected; a newer leader exists, giving the shard up",
                          slot.shard, slot.fence, extra={"shard": slot.shard, "fence": slot.fence})
                self._resign(slot, grace_s=0.0, why="fenced out")

    def _try_resync(self) -> None:
        """Re-read and re-watch; if etcd does not answer (a member just died), try again shortly.

        A broken watch is not a lost session: the lease is judged by the session
        alone, so shards keep running while the mirror catches up.
        """
        try:
            self._resync()
            self._resync_due = 0.0
        except EtcdUnavailable as e:
            log.warning("re-reading %s failed (%s); retrying", self.layout.root, e)
            self._resync_due = clock.monotonic() + 0.5

    def _next_wakeup(self) -> float:
        wait = 1.0
        if self._resync_due:
            wait = min(wait, max(0.05, self._resync_due - clock.monotonic()))
        if (settled_at := self._placer.wake_at()) is not None:
            wait = min(wait, max(0.05, settled_at - clock.monotonic()))
        return wait

    def _wait_stop(self, seconds: float) -> bool:
        end = clock.monotonic() + seconds
        while (left := end - clock.monotonic()) > 0:
            try:
                ev = self._events.get(timeout=left)
            except queue.Empty:
                break
            if isinstance(ev, Stop):
                self._stopping = True
                return True
        return self._stopping

    def _all_idle(self) -> bool:
        return all(s.state in (ShardState.IDLE, ShardState.LOST) for s in self.slots.values())

    def _leave(self) -> None:
        try:
            membership.deregister(self.etcd, self.layout, self.s.node_id)
        except EtcdUnavailable as e:
            log.warning("could not remove the membership key: %s", e)

    # -- decisions ------------------------------------------------------------------

    def _takeovers_in_flight(self) -> dict[str, int]:
        """Per node, the shards it has won and not yet readied, plus those this node is handing it now."""
        busy = takeovers_in_flight(self.view, self.s.shard_count)
        for slot in self.slots.values():
            p = self._placer.placements.get(slot.shard)
            if slot.state is ShardState.RESIGNING and p is not None and p.primary != self.s.node_id:
                busy[p.primary] = busy.get(p.primary, 0) + 1
        return busy

    def _resharding(self) -> bool:
        """A reshard request is out: hand every shard over, as on shutdown, but stay."""
        return self.view.reshard is not None

    def _adopt_shard_count(self) -> None:
        """After a reshard's cut-over, rebuild the shard table for the new count."""
        n = self.view.shard_count
        if not n or n == self.s.shard_count or self._resharding():
            return
        if any(s.state not in (ShardState.IDLE, ShardState.LOST) for s in self.slots.values()):
            return  # still handing over; the next event comes back here
        log.info("the cluster now has %d shards (was %d): campaigning in the new layout", n, self.s.shard_count)
        self.s.shard_count = n
        self.slots = {k: ShardSlot(k) for k in range(n)}
        self._placer.forget()
        self.work.set_shard_count(n)

    def _reconcile(self) -> None:
        self._undecided = False
        self._decide_by = clock.monotonic() + self._next_wakeup()
        if self.session is None or self.session.done.is_set():
            return
        self._adopt_shard_count()
        placements = self._placer.update(clock.monotonic(), self.view, self.s.shard_count)
        busy = self._takeovers_in_flight()
        me = self.s.node_id
        for shard, slot in self.slots.items():
            queue_nodes = [c.node_id for c in self.view.queue(shard)]
            self._check_key_present(slot)
            p = placements.get(shard)
            role = role_of(me, p.primary, p.standby) if p else Role.NONE
            primary = p.primary if p else None
            action = decide(slot.state, role, me, queue_nodes, primary, self._stopping or self._resharding(),
                            primary_busy=busy.get(primary, 0) >= MAX_TAKEOVERS_IN_FLIGHT)
            if action is not Action.NOTHING:
                self._do(slot, action, role)
                if action is Action.RESIGN and slot.state is ShardState.RESIGNING:
                    busy[primary] = busy.get(primary, 0) + 1
                # What an action leads to may call for the next one before any event says so.
                self._undecided = True
        self._proclaim_job_counts()

    def _check_key_present(self, slot: ShardSlot) -> None:
        el = slot.election
        if slot.state not in (ShardState.CANDIDATE, ShardState.LEADER) or el is None:
            return
        if self.view.revision >= el.rev and el.key not in self.view.candidates.get(slot.shard, {}):
            self._lose(slot, f"our key {el.key} disappeared from etcd")

    def _lose(self, slot: ShardSlot, why: str) -> None:
        """Our key is gone or no longer ours: stop the shard's work at once, lead it no more."""
        if slot.state is ShardState.LEADER:
            slot.stop.set()
            self.work.release(slot.shard, 0.0, lambda: None)
            metrics.leader_changes.labels("lost").inc()
        slot.election = None
        self._unproclaimed.discard(slot.shard)
        self._set_state(slot, ShardState.IDLE, why)
        metrics.shards_led.set(len(self.led_shards()))

    def _do(self, slot: ShardSlot, action: Action, role: Role) -> None:
        try:
            if action is Action.CAMPAIGN:
                slot.election = Election(self.etcd, self.session, self.layout, slot.shard)
                slot.election.campaign(self._key_value())
                self._set_state(slot, ShardState.CANDIDATE, f"campaigning as {role.value} (rev {slot.election.rev})")
            elif action is Action.WITHDRAW:
                slot.election.resign()
                slot.election = None
                self._set_state(slot, ShardState.IDLE, "withdrawn: no longer primary or standby")
            elif action is Action.REQUEUE:
                slot.election.resign()
                slot.election.campaign(self._key_value())
                log.info("shard %d: re-queued behind the preferred owner (rev %d)", slot.shard, slot.election.rev)
            elif action is Action.ACQUIRE:
                self._acquire(slot)
            elif action is Action.RESIGN:
                why = ("node stopping" if self._stopping else "resharding" if self._resharding()
                       else "handing over to the preferred owner")
                self._resign(slot, self.s.resign_grace_s, why)
        except FencedOut as e:
            log.error("shard %d: %s; our key is stale, stepping back", slot.shard, e)
            self._abandon_candidacy(slot)
        except StoreUnavailable as e:
            log.error("shard %d: store unavailable while taking the shard (%s); stepping back", slot.shard, e)
            self._abandon_candidacy(slot)
        except EtcdUnavailable as e:
            log.warning("shard %d: %s failed: %s", slot.shard, action.value, e)

    def _acquire(self, slot: ShardSlot) -> None:
        won_at = clock.monotonic()
        el = slot.election
        if not el.is_leader_now():
            return  # the mirror ran ahead of etcd; the deletion event will come
        stop = threading.Event()
        slot.stop = stop
        # The session-lost callback sets the stop event of every slot it finds; an event
        # made after it ran would never be set. So: make the event, then look at the session.
        if self.session.done.is_set():
            stop.set()
            raise SessionLost(self.session.lost_reason or "session lost")
        slot.fence = el.rev + self.s.fence_offset
        self.work.acquire(slot.shard, slot.fence, stop, self.session)
        took = clock.monotonic() - won_at
        metrics.takeover.observe(took)
        jobs = self.work.job_count(slot.shard)
        log.info("shard %d: ready to tick %.0f ms after winning it (%d jobs)", slot.shard, took * 1000, jobs,
                 extra={"shard": slot.shard, "fence": slot.fence})
        self._set_state(slot, ShardState.LEADER, f"elected, fence {slot.fence}")
        metrics.leader_changes.labels("gained").inc()
        metrics.shards_led.set(len(self.led_shards()))
        self._unproclaimed.add(slot.shard)
        self._proclaim_leader(slot, since_ms=clock.wall_ms(), jobs=jobs)

    def _proclaim_leader(self, slot: ShardSlot, since_ms: int, jobs: int) -> None:
        """Publish "leader since, jobs, fence" in our key. Refused means the key is not ours: a lost election."""
        try:
            ours = slot.election.proclaim(self._key_value(since_ms=since_ms, jobs=jobs, fence=slot.fence))
        except EtcdUnavailable as e:
            log.warning("shard %d: could not proclaim leadership (%s); retrying", slot.shard, e)
            return  # still in _unproclaimed: the next reconcile tries again
        if not ours:
            log.error("shard %d: etcd refused our proclaim: our key is gone or another incarnation; "
                      "the election is lost", slot.shard, extra={"shard": slot.shard, "fence": slot.fence})
            self._lose(slot, "proclaim refused: the election is lost")
            return
        self._unproclaimed.discard(slot.shard)
        self._last_proclaim[slot.shard] = jobs

    def _abandon_candidacy(self, slot: ShardSlot) -> None:
        slot.stop.set()
        if slot.election:
            try:
                slot.election.resign()
            except EtcdUnavailable:
                pass
        slot.election = None
        self._set_state(slot, ShardState.IDLE, "stepped back")

    def _resign(self, slot: ShardSlot, grace_s: float, why: str) -> None:
        self._unproclaimed.discard(slot.shard)
        self._set_state(slot, ShardState.RESIGNING, why)
        metrics.leader_changes.labels("given up").inc()
        metrics.shards_led.set(len(self.led_shards()))
        shard = slot.shard
        self.work.release(shard, grace_s, lambda: self._events.put(Drained(shard)))

    def _finish_resign(self, slot: ShardSlot) -> None:
        if slot.state is not ShardState.RESIGNING:
            return
        slot.stop.set()
        try:
            if slot.election:
                slot.election.resign()
        except EtcdUnavailable as e:
            log.warning("shard %d: could not delete our key (%s); it goes with the lease", slot.shard, e)
        slot.election = None
        self._set_state(slot, ShardState.IDLE, "resigned")

    def _key_value(self, since_ms: int | None = None, jobs: int | None = None, fence: int | None = None) -> dict:
        v = {"node": self.s.node_id, "address": self.s.address}
        if since_ms is not None:
            v.update(since_ms=since_ms, jobs=jobs, fence=fence)
        return v

    def _proclaim_job_counts(self) -> None:
        """Keep the job count in the leader key fresh, so `shardcron shards` needs etcd alone.

        At most every JOB_COUNT_PROCLAIM_S: each proclaim is an etcd write that
        every node's watch delivers and reconciles, so during a burst of
        submissions counts proclaimed per change would keep all nodes busy.
        """
        for shard in sorted(self._unproclaimed):  # not ready in etcd's eyes yet: at once, not every 2 s
            slot = self.slots.get(shard)
            if slot is not None and slot.state is ShardState.LEADER and slot.election:
                self._proclaim_leader(slot, since_ms=clock.wall_ms(), jobs=self.work.job_count(shard))
        now = clock.monotonic()
        if now < self._next_count_proclaim:
            return
        self._next_count_proclaim = now + JOB_COUNT_PROCLAIM_S
        for shard in self.led_shards():
            slot = self.slots[shard]
            n = self.work.job_count(shard)
            if self._last_proclaim.get(shard) != n and slot.election and shard not in self._unproclaimed:
                cand = self.view.candidates.get(shard, {}).get(slot.election.key)
                since = cand.leader_since_ms if cand and cand.leader_since_ms else clock.wall_ms()
                self._proclaim_leader(slot, since_ms=since, jobs=n)

