"""The node's control loop: session lifecycle, the cluster mirror, and every shard's state.

One thread runs it. Events arrive on a queue (watch changes, session loss,
shards drained, fenced writes, stop; see events.py); after each batch the loop
asks the pure ``ownership.decide`` what to do for every shard and does it, over
the placement that the pure ``balancer.assign`` gives for the member set that
the pure ``settle`` picks. The only thing that does not wait for this thread is
session loss: every tick's cancel is derived from the session's ``done`` itself
(``leader.shard_cancel``), and the session-lost callback sets every shard's
stop latch directly, so work stops at once even if the loop is busy. What an
action does for one shard in etcd and in the ShardWork is in shard_actions.py;
the slots, their one state setter and the fences published to API threads are
in shard_table.py.

Nothing else in the node would see this loop stuck in a call, and while it is,
its keys stay first in their shards' queues for as long as the lease lives. So
it does its work in steps (``runtime.steps``: each action on a shard, each
proclaim, each re-read of the cluster, each pass over the shards), and the
session's keep-alive thread asks before each renewal whether one step has
lasted past ``step_budget_s``. If so the lease is renewed no more, and the node
is told through its lifeline, as of a dead worker: it logs where the loop is,
revokes the lease (``revoke_lease``) and exits.

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

from shardcron import clock, metrics
from shardcron.abc import ShardWork
from shardcron.coordination import membership
from shardcron.coordination.coordinator_settings import CoordinatorSettings
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.events import (
    Drained,
    Event,
    Fenced,
    SessionLostEvent,
    Stop,
    Wake,
    WatchBroken,
    WatchChanges,
)
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.ownership import Action, Role, ShardState, decide, role_of
from shardcron.coordination.placement import Placer, takeovers_in_flight
from shardcron.coordination.session import Session
from shardcron.coordination.shard_actions import ShardActions
from shardcron.coordination.shard_table import ShardTable
from shardcron.coordination.view import ClusterView
from shardcron.errors import ConfigError, EtcdUnavailable, SessionLost, StoreUnavailable
from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.steps import StepWatch

log = logging.getLogger(__name__)

MAX_TAKEOVERS_IN_FLIGHT = 2
UNDELETED_RETRY_S = 0.5  # how soon a key a failed resign left is tried again (ShardActions.undeleted)  # shards a node may have won and not yet readied before it is handed more


class Coordinator:
    def __init__(
        self,
        etcd: Etcd,
        layout: KeyLayout,
        settings: CoordinatorSettings,
        work: ShardWork,
        verify_etcd: Callable[[], None] = lambda: None,
        lifeline: Lifeline = UNWATCHED,
    ):
        self.etcd = etcd
        self._lifeline = lifeline  # each session's keep-alive thread reports its death through it
        self.layout = layout
        self.s = settings
        self.work = work
        self._verify_etcd = verify_etcd  # raises ConfigError if etcd is not the cluster the fences came from
        self.view = ClusterView(layout)
        self.view_lock = threading.Lock()  # the control thread writes the mirror; API threads read it
        self.table = ShardTable(settings.shard_count)
        self.session: Session | None = None
        # Every lease this node's sessions held: a registration left under one is this node's own (membership).
        self._earlier_leases: set[int] = set()
        self.joined = threading.Event()  # set once registered and watching; cleared on session loss
        self.stopped = threading.Event()  # set when run() has returned
        self.fatal: str | None = None
        self._events: queue.Queue[Event] = queue.Queue()
        self._stopping = False
        self._cancel_watch: Callable[[], None] | None = None
        self._resync_due = 0.0  # when a failed re-read of the mirror is tried again
        self._placer = Placer(settings.settle_s)
        self.steps = StepWatch()  # where this loop is; the session's keep-alive watches it (_stuck)
        self.actions = ShardActions(
            etcd, layout, settings, work, self.table, lambda: self.session, self._events.put, self.steps
        )
        self._undecided = True  # an event since the last _reconcile may change what a shard should do
        self._decide_by = 0.0  # re-decide by then even without such events (settle windows, proclaims)

    # -- public -----------------------------------------------------------------

    def request_stop(self, grace_s: float | None = None) -> None:
        """Hand every shard over (each waiting at most ``grace_s`` for its running ticks; None: the
        configured grace), leave, and revoke the lease."""
        self._events.put(Stop(grace_s))

    def revoke_lease(self) -> None:
        """From another thread, when this one is gone or stuck: stop every shard's work, then revoke the lease,
        so that every key of this node (its shards' leader keys too) goes at once and nothing of this node runs
        on after a successor can lead. The revoke is a no-op once the session is closed or lost."""
        for slot in self.table.slots.values():
            slot.stop.set()
        session = self.session
        if session is not None and not session.done.is_set():
            session.close()

    def report_fenced(self, shard: int, fence: int) -> None:
        """Called by the scheduling side when a write under ``fence`` was rejected."""
        self._events.put(Fenced(shard, fence))

    def led_shards(self) -> list[int]:
        """The shards led here (any thread)."""
        return self.table.led_shards()

    def leader_fence(self, shard: int) -> int | None:
        """The fence this node leads ``shard`` under, or None (any thread)."""
        return self.table.leader_fence(shard)

    def run(self) -> None:
        """Until stopped: open a session, join, keep shards; after a session loss, start over.

        Any other exception (a bug) leaves it, through the node's lifeline, after the shards are let go
        and the lease revoked: its keys go at once, and standbys take the shards without waiting for
        the TTL."""
        backoff = 0.5
        try:
            while not self._stopping:
                try:
                    self._open_session()
                    backoff = 0.5
                    self._serve()
                except (EtcdUnavailable, SessionLost, StoreUnavailable) as e:
                    # StoreUnavailable: a new session first checks etcd's identity against the store's fences
                    # (verify_etcd), which a store cut off or restarting cannot answer. Until it can, this node
                    # leads nothing; it waits the outage out like etcd's, it does not die of it.
                    log.warning("coordination interrupted: %s; retrying in %.1fs", e, backoff)
                    self._drop_session(str(e), revoke=False)  # etcd is away, or the lease is gone already
                    if self._wait_stop(backoff):
                        break
                    backoff = min(backoff * 2, 5.0)
        except ConfigError as e:
            log.error("refusing to lead any shard: %s", e)
            self.fatal = str(e)
        finally:
            self._drop_session("node stopping", revoke=True)
            self.stopped.set()

    # -- session ------------------------------------------------------------------

    def _open_session(self) -> None:
        with self.steps.step("checking etcd's identity against the store"):
            self._verify_etcd()
        with self.steps.step("opening a session"):
            session = Session(
                self.etcd, self.s.ttl_s, name=self.s.node_id, lifeline=self._lifeline, watchdog=self._stuck
            )
        self.session = session
        self._earlier_leases.add(session.lease_id)  # an earlier one, to the sessions after this one
        for slot in self.table.slots.values():
            self.table.set_state(slot, ShardState.IDLE, "new session")  # each leadership gets its own stop latch
            slot.election = None
        session.on_lost(self._on_session_lost)
        metrics.session_alive.set(1)
        deadline = clock.monotonic() + self.s.ttl_s + 2
        while True:
            try:
                with self.steps.step("registering as a member"):
                    membership.register(
                        self.etcd,
                        self.layout,
                        session,
                        self.s.node_id,
                        self.s.address,
                        self.s.started_at_ms,
                        earlier_leases=self._earlier_leases,
                    )
                break
            except ConfigError:
                # A previous incarnation of this node id (killed, restarted fast) holds
                # the key until its lease expires; wait for that, no longer.
                if clock.monotonic() > deadline or self._wait_stop(0.5):
                    raise
        self._resync()
        self.joined.set()
        log.info("joined the cluster as %s (lease %x)", self.s.node_id, session.lease_id)

    def _stuck(self) -> str | None:
        """The session's watchdog (on its keep-alive thread, before each renewal): why this loop is stuck, if
        it has been in one step past its budget. The node hears of it as of the coordinator's death."""
        stall = self.steps.stall("coordinator", clock.monotonic(), self.s.step_budget_s)
        if stall is None:
            return None
        self._lifeline.report("coordinator", stall)
        return str(stall)

    def _on_session_lost(self, reason: str) -> None:
        # Runs on the keepalive thread: stop all work now, not when the loop gets to it.
        for slot in self.table.slots.values():
            slot.stop.set()
        self.joined.clear()
        metrics.session_alive.set(0)
        self._events.put(SessionLostEvent(reason))

    def _drop_session(self, reason: str, revoke: bool = False) -> None:
        """Let every shard go and end the session: revoked (its keys go at once) or orphaned (they expire)."""
        self.joined.clear()
        if self._cancel_watch:
            self._cancel_watch()
            self._cancel_watch = None
        for slot in self.table.slots.values():
            if slot.state in (ShardState.LEADER, ShardState.RESIGNING):
                slot.stop.set()
                self.work.release(slot.shard, 0.0, lambda: None)
            if slot.state is ShardState.LEADER:
                metrics.leader_changes.labels("lost").inc()
            self.table.set_state(slot, ShardState.LOST, reason)
            slot.election = None
        metrics.shards_led.set(0)
        metrics.session_alive.set(0)
        self.actions.undeleted.clear()  # bound to this session's lease: they go with it
        if self.session:
            session, self.session = self.session, None
            if revoke and not session.done.is_set():
                session.close()
            else:
                session.orphan()

    def _resync(self) -> None:
        self._undecided = True
        with self.steps.step("reading the cluster"):
            if self._cancel_watch:
                self._cancel_watch()
            rev, kvs = self.etcd.get_prefix(self.layout.root)
            with self.view_lock:
                self.view.load(rev, kvs)
            self._cancel_watch = self.etcd.watch_prefix(
                self.layout.root,
                rev + 1,
                lambda r, evs: self._events.put(WatchChanges(r, evs)),
                lambda why: self._events.put(WatchBroken(why)),
            )

    # -- the loop -----------------------------------------------------------------

    def _serve(self) -> None:
        self._reconcile()
        while True:
            crashpoints.fail_worker()
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
            with self.steps.step(f"handling {len(batch)} events"):
                for ev in batch:
                    if isinstance(ev, SessionLostEvent) and any(isinstance(e, Stop) for e in batch):
                        self._stopping = True  # a stop that came with the loss must end run(), not be lost with it
                    self._handle(ev)
                if self._resync_due and clock.monotonic() >= self._resync_due:
                    self._try_resync()
                if self._stopping and self.table.all_idle():
                    self._leave()
                    return
                if self.actions.undeleted:
                    self.actions.delete_undeleted_keys()
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
            if ev.grace_s is not None:
                self.s.resign_grace_s = min(self.s.resign_grace_s, ev.grace_s)
        elif isinstance(ev, WatchBroken):
            log.warning("watch on %s broke (%s); re-reading", self.layout.root, ev.reason)
            self._try_resync()
        elif isinstance(ev, Drained):
            if (slot := self.table.slots.get(ev.shard)) is not None:
                self.actions.finish_resign(slot)
        elif isinstance(ev, Fenced):
            slot = self.table.slots.get(ev.shard)
            if slot is not None and slot.state is ShardState.LEADER and slot.fence == ev.fence:
                log.error(
                    "shard %d: a write under fence %d was rejected; a newer leader exists, giving the shard up",
                    slot.shard,
                    slot.fence,
                    extra={"shard": slot.shard, "fence": slot.fence},
                )
                self.actions.resign(slot, grace_s=0.0, why="fenced out")

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
        wait = 1.0 if not self.actions.undeleted else UNDELETED_RETRY_S
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

    def _leave(self) -> None:
        try:
            with self.steps.step("leaving the cluster"):
                membership.deregister(self.etcd, self.layout, self.s.node_id)
        except EtcdUnavailable as e:
            log.warning("could not remove the membership key: %s", e)

    # -- decisions ------------------------------------------------------------------

    def _takeovers_in_flight(self) -> dict[str, int]:
        """Per node, the shards it has won and not yet readied, plus those this node is handing it now."""
        busy = takeovers_in_flight(self.view, self.s.shard_count)
        for slot in self.table.slots.values():
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
        if not self.table.all_idle():
            return  # still handing over; the next event comes back here
        log.info("the cluster now has %d shards (was %d): campaigning in the new layout", n, self.s.shard_count)
        self.s.shard_count = n
        self.table.renew(n)
        self._placer.forget()
        self.work.set_shard_count(n)

    def _reconcile(self) -> None:
        self._undecided = False
        self._decide_by = clock.monotonic() + self._next_wakeup()
        if self.session is None or self.session.done.is_set():
            return
        with self.steps.step("deciding every shard's next action"):
            self._adopt_shard_count()
            placements = self._placer.update(clock.monotonic(), self.view, self.s.shard_count)
            busy = self._takeovers_in_flight()
            me = self.s.node_id
            for shard, slot in self.table.slots.items():
                queue_nodes = [c.node_id for c in self.view.queue(shard)]
                self.actions.check_key_present(slot, self.view)
                p = placements.get(shard)
                role = role_of(me, p.primary, p.standby) if p else Role.NONE
                primary = p.primary if p else None
                action = decide(
                    slot.state,
                    role,
                    me,
                    queue_nodes,
                    primary,
                    self._stopping or self._resharding(),
                    primary_busy=primary is not None and busy.get(primary, 0) >= MAX_TAKEOVERS_IN_FLIGHT,
                )
                if action is not Action.NOTHING:
                    self.actions.do(slot, action, role, resign_why=self._resign_why())
                    if action is Action.RESIGN and slot.state is ShardState.RESIGNING and primary is not None:
                        busy[primary] = busy.get(primary, 0) + 1
                    # What an action leads to may call for the next one before any event says so.
                    self._undecided = True
            self.actions.proclaim_job_counts(self.view)

    def _resign_why(self) -> str:
        return (
            "node stopping"
            if self._stopping
            else "resharding"
            if self._resharding()
            else "handing over to the preferred owner"
        )
