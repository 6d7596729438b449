"""Every change of every shard's leading node, from etcd's own history.

``LeaderHistory`` reads the cluster's keys at one revision, then watches from
the next one, so no change is missed however briefly it lasted (a poll every
100 ms can miss a shard that moved twice in between). Each change is kept
with its etcd revision and the time it arrived here:

- ``moves(from_rev, to_rev)`` counts, per shard, how many times its leading
  node changed (a shard that goes A -> none -> A did not move; A -> B -> C
  moved twice), from the revisions, not from snapshots;
- ``first_settled(...)`` is the first revision at which a condition on the
  whole leader map holds (e.g. balanced over the members);
- ``leaderless(t_from, t_to)`` is, per shard, the longest time in which no
  node led it (its head key had not proclaimed "leader since" yet, or there
  was none), measured on this machine's clock at the watch's arrival times.

A leader is what ``shardcron shards`` calls one: the head of the shard's queue
once it has proclaimed that it is ready.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from shardcron.coordination.etcd import Etcd, WatchEvent
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.view import ClusterView


@dataclass(frozen=True)
class Change:
    revision: int
    t: float  # time.monotonic() when the change arrived here
    shard: int
    leader: str | None  # the node now leading, None while none is


class LeaderHistory:
    def __init__(self, endpoints: str, prefix: str):
        self._etcd = Etcd(endpoints, timeout_s=5.0)
        self._layout = KeyLayout(prefix)
        self._view = ClusterView(self._layout)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.start_revision = 0
        self.leaders_at_start: dict[int, str | None] = {}
        self.start_t = 0.0
        self.changes: list[Change] = []
        self.members_at: list[tuple[int, tuple[str, ...]]] = []  # (revision, active members) at each change
        self._revision = 0
        self._broken: str | None = None
        self._cancel: Callable[[], None] | None = None

    def start(self) -> LeaderHistory:
        rev, kvs = self._etcd.get_prefix(self._layout.root)
        self._view.load(rev, kvs)
        self.start_revision = self._revision = rev
        self.leaders_at_start = self._leaders()
        self.start_t = time.monotonic()
        self.members_at.append((rev, tuple(self._view.active_members())))
        self._cancel = self._etcd.watch_prefix(self._layout.root, rev + 1, self._on_events, self._on_error)
        return self

    def close(self) -> None:
        if self._cancel:
            self._cancel()
            self._cancel = None
        self._etcd.close()

    def __enter__(self) -> LeaderHistory:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the watch ---------------------------------------------------------------------

    def _leaders(self) -> dict[int, str | None]:
        out = {}
        for shard in range(self._view.shard_count or 0):
            head = self._view.leader(shard)
            out[shard] = head.node_id if head and head.leader_since_ms else None
        return out

    def _on_events(self, revision: int, events: list[WatchEvent]) -> None:
        t = time.monotonic()
        # One revision at a time, so a shard's state between two events of one response counts too.
        by_rev: dict[int, list[WatchEvent]] = {}
        for ev in events:
            by_rev.setdefault(ev.kv.mod_revision, []).append(ev)
        with self._cond:
            for rev in sorted(by_rev):
                before = self._leaders()
                members_before = tuple(self._view.active_members())
                self._view.apply(rev, by_rev[rev])
                after = self._leaders()
                for shard in sorted(set(before) | set(after)):
                    if before.get(shard) != after.get(shard):
                        self.changes.append(Change(rev, t, shard, after.get(shard)))
                members = tuple(self._view.active_members())
                if members != members_before:
                    self.members_at.append((rev, members))
            self._revision = max(self._revision, revision)
            self._cond.notify_all()

    def _on_error(self, why: str) -> None:
        with self._cond:
            self._broken = why
            self._cond.notify_all()

    # -- reads -------------------------------------------------------------------------

    def caught_up(self, revision: int, timeout_s: float = 30.0) -> None:
        """Wait until every change up to ``revision`` has arrived."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._revision >= revision or self._broken, timeout_s)
            if self._broken:
                raise RuntimeError(f"the history's watch broke: {self._broken}")
            if not ok:
                raise TimeoutError(f"the history did not reach revision {revision} in {timeout_s}s")

    def catch_up_now(self, timeout_s: float = 30.0) -> int:
        """Wait for every change up to etcd's current revision; returns that revision."""
        _, rev = self._etcd.status()
        self.caught_up(rev, timeout_s)
        return rev

    def leaders_at(self, revision: int) -> dict[int, str | None]:
        with self._lock:
            out = dict(self.leaders_at_start)
            for c in self.changes:
                if c.revision > revision:
                    break
                out[c.shard] = c.leader
        return out

    def revisions(self, after: int = 0) -> list[int]:
        with self._lock:
            return sorted({c.revision for c in self.changes if c.revision > after})

    def first_settled(self, after: int, ok: Callable[[dict[int, str | None]], bool]) -> int | None:
        """The first revision after ``after`` at which ``ok(leader map)`` holds; None if none yet."""
        for rev in self.revisions(after):
            if ok(self.leaders_at(rev)):
                return rev
        return None

    def moves(self, from_rev: int, to_rev: int) -> dict[int, int]:
        """Per shard, how many times its leading node changed in (from_rev, to_rev]; gaps are not moves."""
        last = {s: n for s, n in self.leaders_at(from_rev).items()}
        out: dict[int, int] = {}
        with self._lock:
            changes = [c for c in self.changes if from_rev < c.revision <= to_rev]
        for c in changes:
            if c.leader is None:
                continue
            if last.get(c.shard) is not None and last[c.shard] != c.leader:
                out[c.shard] = out.get(c.shard, 0) + 1
            last[c.shard] = c.leader
        return out

    def leaderless(self, t_from: float, t_to: float | None = None) -> dict[int, float]:
        """Per shard, the longest time in [t_from, t_to] in which no node led it, in seconds."""
        t_to = time.monotonic() if t_to is None else t_to
        with self._lock:
            changes = list(self.changes)
        state = dict(self.leaders_at_start)
        since = {s: (self.start_t if n is None else None) for s, n in state.items()}
        worst: dict[int, float] = {}

        def close(shard: int, t: float) -> None:
            began = since.get(shard)
            if began is not None:
                lo, hi = max(began, t_from), min(t, t_to)
                if hi > lo:
                    worst[shard] = max(worst.get(shard, 0.0), hi - lo)
            since[shard] = None

        for c in changes:
            if c.leader is None and state.get(c.shard) is not None:
                since[c.shard] = c.t
            elif c.leader is not None and state.get(c.shard) is None:
                close(c.shard, c.t)
            state[c.shard] = c.leader
        for shard, n in state.items():
            if n is None:
                close(shard, t_to)
        return worst
