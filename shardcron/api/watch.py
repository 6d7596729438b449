"""WatchTicks: tick results as they are written, for one job or for all.

* One job: its ticks are written by its shard's leader only, so the stream is
  served there. The receiving node streams from its own recorder if it leads
  the shard, else relays the leader's stream; when leadership moves, the old
  leader ends its stream (UNAVAILABLE) and the receiving node follows the new one.
* All jobs: the receiving node merges its own results with a ``local_only``
  stream from every other member, reconnecting to each until the caller leaves.

Nothing here ever blocks the recorder: each stream has a bounded queue that
drops its oldest event when full, and tells the watcher how many it dropped.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator

import grpc

from shardcron import clock
from shardcron.abc import Backend
from shardcron.model import Tick
from shardcron.api.convert import tick_event_to_proto
from shardcron.api.routing import FORWARDED_METADATA, Router, not_leader_here
from shardcron.api.status import CallFailed
from shardcron.sharding import shard_for
from shardcron.v1 import scheduler_pb2 as pb

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000  # events buffered per watcher before the oldest are dropped
POLL_S = 0.5  # how often an idle stream checks that its caller and its leadership are still there
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 2.0
PEER_REFRESH_S = 2.0


class DropOldestQueue:
    """A bounded queue whose ``put`` never blocks: when full, the oldest item goes."""

    def __init__(self, limit: int = QUEUE_LIMIT):
        self._items: deque = deque()
        self._limit = limit
        self._cond = threading.Condition()
        self._dropped = 0
        self.dropped_total = 0

    def put(self, item) -> None:
        with self._cond:
            if len(self._items) >= self._limit:
                self._items.popleft()
                self._dropped += 1
                self.dropped_total += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout_s: float) -> tuple[object | None, int]:
        """(item, events dropped since the last item returned), or (None, 0) after ``timeout_s``."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout_s)
            if not self._items:
                return None, 0
            dropped, self._dropped = self._dropped, 0
            return self._items.popleft(), dropped


def _as_proto(item, dropped: int) -> pb.TickEvent:
    if isinstance(item, Tick):
        return tick_event_to_proto(item, dropped)
    if dropped:
        item = pb.TickEvent(tick=item.tick, dropped=item.dropped + dropped)
    return item


class Watches:
    """Serves WatchTicks calls for one node."""

    def __init__(self, backend: Backend, router: Router, stopping: threading.Event):
        self.backend = backend
        self.router = router
        self.stopping = stopping

    def _live(self, context: grpc.ServicerContext) -> bool:
        return context.is_active() and not self.stopping.is_set()

    def _pause(self, seconds: float) -> None:
        self.stopping.wait(seconds)

    # -- this node's own results --------------------------------------------------

    def local(self, context, job_id: str, *, lead_shard: int | None = None) -> Iterator[pb.TickEvent]:
        """This node's tick results (of ``job_id``, or all). With ``lead_shard``, the stream
        ends as soon as this node stops leading that shard (after what it queued)."""
        q = DropOldestQueue()

        def on_tick(ev: Tick) -> None:
            if not job_id or ev.job_id == job_id:
                q.put(ev)

        unsubscribe = self.backend.subscribe_ticks(on_tick)
        try:
            while self._live(context):
                item, dropped = q.get(POLL_S)
                if item is not None:
                    yield _as_proto(item, dropped)
                elif lead_shard is not None and self.backend.fence_if_leader(lead_shard) is None:
                    return
        finally:
            unsubscribe()

    # -- one job: from its shard's leader -------------------------------------------

    def forwarded_job(self, context, job_id: str) -> Iterator[pb.TickEvent]:
        """Another node relays this stream to its caller: serve it while we lead, then say so."""
        shard = shard_for(job_id, self.backend.shard_count)
        if self.backend.fence_if_leader(shard) is None:
            raise not_leader_here(self.backend.node_id, shard)
        yield from self.local(context, job_id, lead_shard=shard)
        if self._live(context):
            raise not_leader_here(self.backend.node_id, shard)

    def job(self, context, request: pb.WatchTicksRequest) -> Iterator[pb.TickEvent]:
        shard = shard_for(request.job_id, self.backend.shard_count)
        upstream: list = [None]

        def cancel_upstream() -> None:
            call = upstream[0]
            if call is not None:
                call.cancel()

        context.add_callback(cancel_upstream)
        backoff = RECONNECT_FIRST_S
        while self._live(context):
            if self.backend.fence_if_leader(shard) is not None:
                yield from self.local(context, request.job_id, lead_shard=shard)
                backoff = RECONNECT_FIRST_S
                continue
            addr = self.router.leader_elsewhere(shard)
            if addr:
                call = self.router.stub(addr).WatchTicks(
                    pb.WatchTicksRequest(job_id=request.job_id), metadata=FORWARDED_METADATA)
                upstream[0] = call
                try:
                    for ev in call:
                        backoff = RECONNECT_FIRST_S
                        yield ev
                except grpc.RpcError as e:
                    if e.code() is not grpc.StatusCode.CANCELLED:
                        log.debug("watch of %s at %s ended: %s", request.job_id, addr, e.details())
                finally:
                    upstream[0] = None
                    call.cancel()
            if not self._live(context):
                break
            self._pause(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)

    # -- every job: fan in from every member ---------------------------------------

    def all(self, context) -> Iterator[pb.TickEvent]:
        q = DropOldestQueue()
        unsubscribe = self.backend.subscribe_ticks(q.put)
        peers: dict[str, _PeerFeed] = {}
        next_refresh = 0.0
        try:
            while self._live(context):
                if clock.monotonic() >= next_refresh:
                    self._refresh_peers(peers, q)
                    next_refresh = clock.monotonic() + PEER_REFRESH_S
                item, dropped = q.get(POLL_S)
                if item is not None:
                    yield _as_proto(item, dropped)
        finally:
            unsubscribe()
            for feed in peers.values():
                feed.stop()

    def _refresh_peers(self, peers: dict[str, _PeerFeed], q: DropOldestQueue) -> None:
        try:
            nodes = self.backend.shard_map().get("nodes", [])
        except Exception:  # noqa: BLE001 - keep the feeds we have; try again at the next refresh
            log.warning("cannot read the member list for a tick watch", exc_info=True)
            return
        wanted = {n["address"] for n in nodes if n.get("address") and n["address"] != self.router.own_address}
        for addr in set(peers) - wanted:
            peers.pop(addr).stop()
        for addr in wanted - set(peers):
            peers[addr] = _PeerFeed(self.router, addr, q, self.stopping)


class _PeerFeed:
    """One member's own tick results, fed into a watcher's queue; reconnects until stopped."""

    def __init__(self, router: Router, address: str, q: DropOldestQueue, stopping: threading.Event):
        self._router = router
        self._address = address
        self._q = q
        self._server_stopping = stopping
        self._stopped = threading.Event()
        self._call = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"watch-{address}", daemon=True)
        self._thread.start()

    def _done(self) -> bool:
        return self._stopped.is_set() or self._server_stopping.is_set() or self._router.closed.is_set()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()

    def _run(self) -> None:
        backoff = RECONNECT_FIRST_S
        while not self._done():
            try:
                with self._lock:
                    if self._done():
                        return
                    call = self._call = self._router.stub(self._address).WatchTicks(
                        pb.WatchTicksRequest(local_only=True), metadata=FORWARDED_METADATA)
                for ev in call:
                    backoff = RECONNECT_FIRST_S
                    self._q.put(ev)
            except grpc.RpcError as e:
                if not self._done():
                    log.debug("tick feed from %s ended: %s", self._address, e.details())
            except (CallFailed, ValueError):  # the router, or its channel, was closed: the server is stopping
                return
            finally:
                with self._lock:
                    self._call = None
            self._stopped.wait(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)
