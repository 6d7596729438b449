"""What the coordinator does for one shard once ``ownership.decide`` has said what: the etcd and ShardWork side.

Campaign, withdraw, re-queue, acquire (raise the fence, start the work),
proclaim "leader since", resign and finish resigning, abandon a candidacy,
lose an election; and the periodic job-count proclaims. Every state change
goes through the table's one setter. All of it runs on the control thread;
the only thing that comes back from elsewhere is ``Drained``, posted by the
release thread when a resigning shard's ticks are done. Each action, each
proclaim and each retried key deletion is one of the coordinator's steps
(``runtime.steps``), which its session's keep-alive watches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardcron import clock, metrics
from shardcron.abc import ShardWork
from shardcron.coordination.coordinator_settings import CoordinatorSettings
from shardcron.coordination.election import Election
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.events import Drained, Event
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.ownership import Action, Role, ShardSlot, ShardState
from shardcron.coordination.session import Session
from shardcron.coordination.shard_table import ShardTable
from shardcron.coordination.view import ClusterView
from shardcron.errors import EtcdUnavailable, FencedOut, SessionLost, StoreUnavailable
from shardcron.runtime import crashpoints
from shardcron.runtime.latch import Latch
from shardcron.runtime.steps import StepWatch

log = logging.getLogger(__name__)

JOB_COUNT_PROCLAIM_S = 2.0  # how stale the job counts that `shardcron shards` shows may be


class ShardActions:
    def __init__(
        self,
        etcd: Etcd,
        layout: KeyLayout,
        settings: CoordinatorSettings,
        work: ShardWork,
        table: ShardTable,
        session: Callable[[], Session | None],
        post: Callable[[Event], None],
        steps: StepWatch,
    ):
        self.etcd = etcd
        self.layout = layout
        self.s = settings
        self.work = work
        self.table = table
        self._session = session  # the coordinator's current session; it changes on every reconnect
        self._post = post  # puts an event on the coordinator's queue (any thread)
        self._steps = steps  # the coordinator's: each action is a step of its own
        self._last_proclaim: dict[int, int] = {}
        self._unproclaimed: set[int] = set()  # led shards whose "leader since" etcd has not taken yet
        # Our election keys that a resign or a withdrawal could not delete (etcd did not answer). Each stays
        # bound to our live lease and, first in its shard's queue, would keep every other node from leading
        # the shard while we lead it no more: retried until gone (``delete_undeleted_keys``).
        self.undeleted: dict[int, Election] = {}
        self._next_count_proclaim = 0.0

    def do(self, slot: ShardSlot, action: Action, role: Role, resign_why: str) -> None:
        """Carry out ``action`` for ``slot``; ``resign_why`` says why, should it be a resign."""
        with self._steps.step(f"shard {slot.shard}: {action.value}"):
            crashpoints.hang_in_action(action.value)
            self._do(slot, action, role, resign_why)

    def _do(self, slot: ShardSlot, action: Action, role: Role, resign_why: str) -> None:
        try:
            if action is Action.CAMPAIGN:
                slot.election = el = Election(self.etcd, self._held_session(), self.layout, slot.shard)
                el.campaign(self._key_value())
                self.table.set_state(slot, ShardState.CANDIDATE, f"campaigning as {role.value} (rev {el.rev})")
            elif action is Action.WITHDRAW:
                self._election_of(slot).resign()
                slot.election = None
                self.table.set_state(slot, ShardState.IDLE, "withdrawn: no longer primary or standby")
            elif action is Action.REQUEUE:
                el = self._election_of(slot)
                el.resign()
                el.campaign(self._key_value())
                log.info("shard %d: re-queued behind the preferred owner (rev %d)", slot.shard, el.rev)
            elif action is Action.ACQUIRE:
                self.acquire(slot)
            elif action is Action.RESIGN:
                self.resign(slot, self.s.resign_grace_s, resign_why)
        except FencedOut as e:
            log.error("shard %d: %s; our key is stale, stepping back", slot.shard, e)
            self.abandon_candidacy(slot)
        except StoreUnavailable as e:
            log.error("shard %d: store unavailable while taking the shard (%s); stepping back", slot.shard, e)
            self.abandon_candidacy(slot)
        except EtcdUnavailable as e:
            log.warning("shard %d: %s failed: %s", slot.shard, action.value, e)

    def check_key_present(self, slot: ShardSlot, view: ClusterView) -> None:
        """Lose the shard if the mirror, caught up with our key's revision, no longer holds our key."""
        el = slot.election
        if slot.state not in (ShardState.CANDIDATE, ShardState.LEADER) or el is None:
            return
        if view.revision >= el.rev and el.key not in view.candidates.get(slot.shard, {}):
            self.lose(slot, f"our key {el.key} disappeared from etcd")

    def lose(self, slot: ShardSlot, why: str) -> None:
        """Our key is gone or no longer ours: stop the shard's work at once, lead it no more."""
        if slot.state is ShardState.LEADER:
            self.work.release(slot.shard, 0.0, lambda: None)  # sets the stop latch first thing
            metrics.leader_changes.labels("lost").inc()
        slot.election = None
        self._unproclaimed.discard(slot.shard)
        self.table.set_state(slot, ShardState.IDLE, why)
        metrics.shards_led.set(len(self.table.led_shards()))

    def acquire(self, slot: ShardSlot) -> None:
        won_at = clock.monotonic()
        el = self._election_of(slot)
        if not el.is_leader_now():
            return  # the mirror ran ahead of etcd; the deletion event will come
        session = self._held_session()
        stop = Latch()
        slot.stop = stop
        # The session-lost callback sets the stop event of every slot it finds; an event
        # made after it ran would never be set. So: make the event, then look at the session.
        if session.done.is_set():
            stop.set()
            raise SessionLost(session.lost_reason or "session lost")
        slot.fence = el.rev + self.s.fence_offset
        self.work.acquire(slot.shard, slot.fence, stop, session)
        took = clock.monotonic() - won_at
        metrics.takeover.observe(took)
        jobs = self.work.job_count(slot.shard)
        log.info(
            "shard %d: ready to tick %.0f ms after winning it (%d jobs)",
            slot.shard,
            took * 1000,
            jobs,
            extra={"shard": slot.shard, "fence": slot.fence},
        )
        self.table.set_state(slot, ShardState.LEADER, f"elected, fence {slot.fence}")
        metrics.leader_changes.labels("gained").inc()
        metrics.shards_led.set(len(self.table.led_shards()))
        self._unproclaimed.add(slot.shard)
        self.proclaim_leader(slot, since_ms=clock.wall_ms(), jobs=jobs)

    def proclaim_leader(self, slot: ShardSlot, since_ms: int, jobs: int) -> None:
        """Publish "leader since, jobs, fence" in our key. Refused means the key is not ours: a lost election."""
        try:
            with self._steps.step(f"shard {slot.shard}: proclaiming its leader"):
                ours = self._election_of(slot).proclaim(self._key_value(since_ms=since_ms, jobs=jobs, fence=slot.fence))
        except EtcdUnavailable as e:
            log.warning("shard %d: could not proclaim leadership (%s); retrying", slot.shard, e)
            return  # still in _unproclaimed: the next reconcile tries again
        if not ours:
            log.error(
                "shard %d: etcd refused our proclaim: our key is gone or another incarnation; the election is lost",
                slot.shard,
                extra={"shard": slot.shard, "fence": slot.fence},
            )
            self.lose(slot, "proclaim refused: the election is lost")
            return
        self._unproclaimed.discard(slot.shard)
        self._last_proclaim[slot.shard] = jobs

    def abandon_candidacy(self, slot: ShardSlot) -> None:
        slot.stop.set()  # before the key goes: a half-taken shard's work must stop before a successor can start
        if slot.election:
            self._delete_key(slot.shard, slot.election)
        slot.election = None
        self.table.set_state(slot, ShardState.IDLE, "stepped back")

    def resign(self, slot: ShardSlot, grace_s: float, why: str) -> None:
        self._unproclaimed.discard(slot.shard)
        self.table.set_state(slot, ShardState.RESIGNING, why)
        metrics.leader_changes.labels("given up").inc()
        metrics.shards_led.set(len(self.table.led_shards()))
        shard = slot.shard
        self.work.release(shard, grace_s, lambda: self._post(Drained(shard)))

    def finish_resign(self, slot: ShardSlot) -> None:
        if slot.state is not ShardState.RESIGNING:
            return
        slot.stop.set()  # before the key goes: the next leader may start as soon as it has
        if slot.election:
            self._delete_key(slot.shard, slot.election)
        slot.election = None
        self.table.set_state(slot, ShardState.IDLE, "resigned")

    def _delete_key(self, shard: int, election: Election) -> None:
        try:
            election.resign()
        except EtcdUnavailable as e:
            log.warning("shard %d: could not delete our key (%s); trying again until it is gone", shard, e)
            self.undeleted[shard] = election

    def delete_undeleted_keys(self) -> None:
        """Try again to delete the keys a resign or a withdrawal left (the coordinator's loop, each pass while
        any is left). A new session clears them: the old lease took its keys with it."""
        for shard, election in list(self.undeleted.items()):
            current = self.table.slots[shard].election
            if current is not None and current.rev == election.rev:
                # Campaigning again in this session put the same key (it is named by the lease) and found it
                # there: the slot has taken it back as its own, so it is not ours to delete.
                del self.undeleted[shard]
                continue
            try:
                with self._steps.step(f"shard {shard}: deleting our key a failed resign left"):
                    election.resign()
            except EtcdUnavailable:
                continue
            del self.undeleted[shard]
            log.info("shard %d: our key left by a failed resign is deleted", shard, extra={"shard": shard})

    def _election_of(self, slot: ShardSlot) -> Election:
        """The slot's election: ``decide`` asks for these actions only of a slot that campaigns."""
        if slot.election is None:
            raise SessionLost(f"shard {slot.shard}: no election to act on")
        return slot.election

    def _held_session(self) -> Session:
        """The coordinator's session: actions run only while it holds one."""
        session = self._session()
        if session is None:
            raise SessionLost("no session")
        return session

    def _key_value(
        self, since_ms: int | None = None, jobs: int | None = None, fence: int | None = None
    ) -> dict[str, object]:
        v: dict[str, object] = {"node": self.s.node_id, "address": self.s.address}
        if since_ms is not None:
            v.update(since_ms=since_ms, jobs=jobs, fence=fence)
        return v

    def proclaim_job_counts(self, view: ClusterView) -> None:
        """Keep the job count in the leader key fresh, so `shardcron shards` needs etcd alone.

        At most every JOB_COUNT_PROCLAIM_S: each proclaim is an etcd write that
        every node's watch delivers and reconciles, so during a burst of
        submissions counts proclaimed per change would keep all nodes busy.
        """
        for shard in sorted(self._unproclaimed):  # not ready in etcd's eyes yet: at once, not every 2 s
            slot = self.table.slots.get(shard)
            if slot is not None and slot.state is ShardState.LEADER and slot.election:
                self.proclaim_leader(slot, since_ms=clock.wall_ms(), jobs=self.work.job_count(shard))
        now = clock.monotonic()
        if now < self._next_count_proclaim:
            return
        self._next_count_proclaim = now + JOB_COUNT_PROCLAIM_S
        for shard in self.table.led_shards():
            slot = self.table.slots[shard]
            n = self.work.job_count(shard)
            if self._last_proclaim.get(shard) != n and slot.election and shard not in self._unproclaimed:
                cand = view.candidates.get(shard, {}).get(slot.election.key)
                since = cand.leader_since_ms if cand and cand.leader_since_ms else clock.wall_ms()
                self.proclaim_leader(slot, since_ms=since, jobs=n)
