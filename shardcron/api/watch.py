"""WatchTicks: tick results as they are written, for one job or for all.

* One job: its ticks are written by its shard's leader only, so the stream is
  served there. The receiving node streams from its own recorder if it leads
  the shard, else relays the leader's stream; when leadership moves, the old
  leader ends its stream (UNAVAILABLE) and the receiving node follows the new one.
* All jobs: the receiving node merges its own results with a ``local_only``
  stream from every other member. Those member feeds are shared: however many
  all-jobs watchers a node serves, it holds one feed per member while it has any.

A watcher costs no thread: every stream is a coroutine on the API server's
loop. This node's results reach the loop through one ``TickHub``, which the
recorder hands ticks to without ever blocking; each watcher has a bounded
queue that drops its oldest event when full, and tells the watcher how many
it dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable

import grpc

from shardcron.abc import Backend
from shardcron.api.routing import Router, not_leader_here
from shardcron.api.status import CallFailed
from shardcron.jobkey import DEFAULT_NAMESPACE, namespace_of, split_key
from shardcron.model import Tick
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.sharding import shard_for
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.tick_convert import tick_event_to_proto

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000  # events buffered per watcher before the oldest are dropped
POLL_S = 0.5  # how often an idle stream bound to a shard's leadership checks that it still leads
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 2.0
PEER_REFRESH_S = 2.0


class WatcherQueue:
    """One watcher's events, on the loop. ``put`` never blocks: when full, the oldest event goes."""

    def __init__(self, job_id: str = "", limit: int = QUEUE_LIMIT, namespaces: frozenset[str] | None = None):
        self.job_id = job_id  # a job's key; "" : every job of ``namespaces``
        self.namespaces = namespaces  # None: every namespace
        self._items: deque[pb.TickEvent] = deque()
        self._limit = limit
        self._ready = asyncio.Event()
        self._dropped = 0

    def wants(self, job_id: str) -> bool:
        if self.job_id:
            return self.job_id == job_id
        return self.namespaces is None or namespace_of(job_id) in self.namespaces

    def wants_event(self, event: pb.TickEvent) -> bool:
        """An event another member streamed (every namespace it records) that this watcher may see."""
        return self.namespaces is None or (event.tick.namespace or DEFAULT_NAMESPACE) in self.namespaces

    def wake(self) -> None:
        self._ready.set()

    def put(self, event: pb.TickEvent) -> None:
        if len(self._items) >= self._limit:
            self._items.popleft()
            self._dropped += 1
        self._items.append(event)
        self._ready.set()

    async def get(self, timeout_s: float | None) -> pb.TickEvent | None:
        """The next event (counting the ones dropped before it), or None after ``timeout_s``
        (None: until there is one; the server's stop cancels the wait)."""
        if not self._items:
            self._ready.clear()
            if timeout_s is None:
                await self._ready.wait()
            else:
                try:
                    await asyncio.wait_for(self._ready.wait(), timeout_s)
                except TimeoutError:
                    return None
            if not self._items:  # woken without an event: the node is stopping
                return None
        event = self._items.popleft()
        if self._dropped:
            event = pb.TickEvent(tick=event.tick, dropped=event.dropped + self._dropped)
            self._dropped = 0
        return event


class TickHub:
    """This node's tick results, handed from the recorder's threads to the watchers on the loop.

    It is subscribed to the node's results only while it has a watcher, so a node that nobody
    watches builds no event at all. The recorder's callback only appends a batch under a lock
    and, for the first batch since the last fan-out, schedules one fan-out on the loop."""

    def __init__(self, backend: Backend, loop: asyncio.AbstractEventLoop):
        self._backend = backend
        self._loop = loop
        self._watchers: set[WatcherQueue] = set()
        self._lock = threading.Lock()
        self._pending: list[Tick] = []
        self._scheduled = False
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False

    def add(self, q: WatcherQueue) -> None:  # on the loop, as remove and close
        self._watchers.add(q)
        if self._unsubscribe is None and not self._closed:
            self._unsubscribe = self._backend.subscribe_ticks(self._from_recorder)

    def remove(self, q: WatcherQueue) -> None:
        self._watchers.discard(q)
        if not self._watchers:
            self._stop_listening()

    def close(self) -> None:
        self._closed = True
        self._stop_listening()

    def _stop_listening(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def wake_all(self) -> None:
        """Every watcher looks up from its wait (the node is stopping: they end on their own)."""
        for q in list(self._watchers):
            q.wake()

    def _from_recorder(self, ticks: list[Tick]) -> None:  # any thread
        with self._lock:
            self._pending.extend(ticks)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._fan_out)
        except RuntimeError:  # the loop is closed: the server is stopping
            pass

    def _fan_out(self) -> None:
        with self._lock:
            ticks, self._pending, self._scheduled = self._pending, [], False
        watchers = list(self._watchers)
        for tick in ticks:
            event = tick_event_to_proto(tick, 0)
            for q in watchers:
                if q.wants(tick.job_id):
                    q.put(event)


class MemberFeeds:
    """One ``local_only`` stream from every other member, shared by all of this node's all-jobs watchers.

    Runs while at least one such watcher is open; re-reads the member list every
    PEER_REFRESH_S and reconnects to each member until it leaves the cluster."""

    def __init__(self, backend: Backend, router: Router, lifeline: Lifeline = UNWATCHED):
        self.backend = backend
        self.router = router
        self._lifeline = lifeline
        self._watchers: set[WatcherQueue] = set()
        self._task: asyncio.Task | None = None

    def add(self, q: WatcherQueue) -> None:
        self._watchers.add(q)
        if self._task is None:
            self._task = self._lifeline.task(asyncio.get_running_loop(), self._run(), "member-feeds")

    def remove(self, q: WatcherQueue) -> None:
        self._watchers.discard(q)
        if not self._watchers and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        feeds: dict[str, asyncio.Task] = {}
        try:
            while True:
                wanted = self._members()
                if wanted is not None:
                    for addr in set(feeds) - wanted:
                        feeds.pop(addr).cancel()
                    for addr in wanted - set(feeds):
                        # A feed ends on its own once the router closes, as the server stops.
                        feeds[addr] = self._lifeline.task(
                            asyncio.get_running_loop(), self._feed(addr), f"feed-{addr}", may_end=True
                        )
                await asyncio.sleep(PEER_REFRESH_S)
        finally:
            for task in feeds.values():
                task.cancel()

    def _members(self) -> set[str] | None:
        try:
            nodes = self.backend.shard_map().get("nodes", [])
        except Exception:  # noqa: BLE001 - keep the feeds we have; try again at the next refresh
            log.warning("cannot read the member list for a tick watch", exc_info=True)
            return None
        return {n["address"] for n in nodes if n.get("address") and n["address"] != self.router.own_address}

    async def _feed(self, address: str) -> None:
        backoff = RECONNECT_FIRST_S
        while not self.router.closed.is_set():
            call = None
            try:
                # Every namespace: this feed serves every watcher here, each filtered on arrival.
                call = self.router.stub(address).WatchTicks(
                    pb.WatchTicksRequest(local_only=True, namespace=ALL_NAMESPACES), metadata=self.router.own_metadata()
                )
                async for event in call:
                    backoff = RECONNECT_FIRST_S
                    for q in list(self._watchers):
                        if q.wants_event(event):
                            q.put(event)
            except grpc.RpcError as e:
                log.debug("tick feed from %s ended: %s", address, e.details())
            except CallFailed:  # the router is closed: the server is stopping
                return
            finally:
                if call is not None:
                    call.cancel()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)


class Watches:
    """Serves WatchTicks calls for one node; made on the API server's loop."""

    def __init__(self, backend: Backend, router: Router, stopping: threading.Event, lifeline: Lifeline = UNWATCHED):
        self.backend = backend
        self.router = router
        self.stopping = stopping
        self.hub = TickHub(backend, asyncio.get_running_loop())
        self.members = MemberFeeds(backend, router, lifeline)

    def close(self) -> None:
        self.hub.close()

    # -- this node's own results --------------------------------------------------

    async def local(
        self, job_id: str, *, lead_shard: int | None = None, namespaces: frozenset[str] | None = None
    ) -> AsyncIterator[pb.TickEvent]:
        """This node's tick results (of the job keyed ``job_id``, or all of ``namespaces``). With
        ``lead_shard``, the stream ends as soon as this node stops leading that shard (after what it queued)."""
        q = WatcherQueue(job_id, namespaces=namespaces)
        self.hub.add(q)
        # Only a stream bound to a shard's leadership has something to check while idle: the
        # others wait without a timer (2,000 idle watchers would otherwise wake the loop 4,000
        # times a second).
        poll_s = POLL_S if lead_shard is not None else None
        try:
            while not self.stopping.is_set():
                event = await q.get(poll_s)
                if event is not None:
                    yield event
                elif lead_shard is not None and self.backend.fence_if_leader(lead_shard) is None:
                    return
        finally:
            self.hub.remove(q)

    # -- one job: from its shard's leader -------------------------------------------

    async def forwarded_job(self, job_id: str) -> AsyncIterator[pb.TickEvent]:
        """Another node relays this stream to its caller: serve it while we lead, then say so."""
        shard = shard_for(job_id, self.backend.shard_count)
        if self.backend.fence_if_leader(shard) is None:
            raise not_leader_here(self.backend.node_id, shard)
        async for event in self.local(job_id, lead_shard=shard):
            yield event
        if not self.stopping.is_set():
            raise not_leader_here(self.backend.node_id, shard)

    async def job(self, job_id: str) -> AsyncIterator[pb.TickEvent]:
        shard = shard_for(job_id, self.backend.shard_count)
        backoff = RECONNECT_FIRST_S
        while not self.stopping.is_set():
            if self.backend.fence_if_leader(shard) is not None:
                async for event in self.local(job_id, lead_shard=shard):
                    yield event
                backoff = RECONNECT_FIRST_S
                continue
            addr = self.router.leader_elsewhere(shard)
            if addr:
                key = split_key(job_id)
                call = self.router.stub(addr).WatchTicks(
                    pb.WatchTicksRequest(job_id=key.id, namespace=key.namespace),
                    metadata=self.router.forward_metadata(),
                )
                try:
                    async for event in call:
                        backoff = RECONNECT_FIRST_S
                        yield event
                except grpc.RpcError as e:
                    log.debug("watch of %s at %s ended: %s", job_id, addr, e.details())
                finally:
                    call.cancel()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)

    # -- every job: fan in from every member ---------------------------------------

    async def all(self, namespaces: frozenset[str] | None) -> AsyncIterator[pb.TickEvent]:
        """Every job's ticks, of ``namespaces`` (None: every namespace), from every member."""
        q = WatcherQueue(namespaces=namespaces)
        self.hub.add(q)
        self.members.add(q)
        try:
            while not self.stopping.is_set():
                event = await q.get(None)
                if event is not None:
                    yield event
        finally:
            self.hub.remove(q)
            self.members.remove(q)
