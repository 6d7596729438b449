"""Shard -> leader: serve a call here if this node leads the job's shard, else forward it there.

A call about one job runs on the leader of the job's shard. The node that
receives it either is that leader (the call runs here, under the shard's
fence) or forwards it, once, to the leader's advertised address, passing the
caller's remaining time and returning the leader's status as it is. It passes
on the CALLER's bearer secret, and this node's own in ``x-shardcron-node-token``:
the leader checks the caller's scope capped by the node's (``api/auth.py``).

A forwarded call carries ``x-shardcron-forwarded``, sealed with the cluster's
forwarding secret (``api/peers.py``); a marker without that seal is ignored, so
only a member node's call counts as forwarded. PutJob's forwards (its ``remote``)
go through ``put_combining.PutJobCombiner``: the ones of one caller to one leader
that meet share one call, and each comes back here as its own PutJob's answer
would, so this retry loop sees no difference. A forwarded call is never forwarded
again: a node that no longer leads the shard answers UNAVAILABLE with
``x-shardcron-retry``, and the node that forwarded it asks the new leader.
While the shard has no leader (failover), the receiving node retries with a
short backoff, re-reading the leader each time, until the caller's deadline
(30 s when the caller set none); then UNAVAILABLE names the shard.

Everything here runs on the API server's event loop: a forwarded call costs no
thread, only the local part (a store write) runs on the server's pool
(``Router.blocking``). Each peer has one long-lived ``grpc.aio`` channel, with
keep-alive pings, so a frozen peer or a half-open connection fails the calls on
it within the keep-alive timeout instead of at each call's deadline.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

import grpc

from shardcron.abc import Backend
from shardcron.api.auth import AUTHORIZATION, NODE_TOKEN_HEADER, caller_secret, forwarded_by_peer, sent_elsewhere
from shardcron.api.peers import Seal, node_local_seal
from shardcron.api.status import CallFailed
from shardcron.client.channel import (
    CHANNEL_OPTIONS,
    RETRY_HEADER,
    ChannelSecurity,
    answered_by_a_node,
    open_aio_channel,
    token_metadata,
    trailing_metadata,
)
from shardcron.errors import FencedOut, NotLeader
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc

T = TypeVar("T")

DEFAULT_DEADLINE_S = 30.0  # for callers that set none
_NO_DEADLINE_S = 10**6  # grpc reports "no deadline" as a far-away one
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 0.5


@dataclass
class Deadline:
    """The time a call may take on this node, ending a little before the caller's own deadline
    so that our answer (UNAVAILABLE naming the shard) still reaches the caller."""

    started: float
    ends: float
    backoff_s: float = BACKOFF_FIRST_S  # the next pause between tries

    @classmethod
    def of(cls, context: grpc.aio.ServicerContext) -> Deadline:
        now = time.monotonic()
        remaining = context.time_remaining()
        if remaining is None or remaining > _NO_DEADLINE_S:
            remaining = DEFAULT_DEADLINE_S
        margin = min(0.2, remaining * 0.1)
        return cls(now, now + max(0.0, remaining - margin))

    def remaining(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def wait_to_retry(self, stopping: threading.Event) -> bool:
        """Pause before the next try (doubling from BACKOFF_FIRST_S to BACKOFF_MAX_S, never past
        the deadline); False when no try is left: the deadline passed or this node is stopping.
        (A caller that goes away cancels the call's task, and so this pause.)"""
        if stopping.is_set() or self.remaining() <= 0.0:
            return False
        await asyncio.sleep(min(self.backoff_s, self.remaining()))
        self.backoff_s = min(self.backoff_s * 2, BACKOFF_MAX_S)
        return True


def is_forwarded(context: grpc.aio.ServicerContext) -> bool:
    """Whether the call being served (``context``) was forwarded by a member node: its marker's seal was
    checked when it arrived (``auth.Authorize``); a marker from anyone else does not count."""
    return forwarded_by_peer()


def leader_moved(e: grpc.RpcError) -> bool:
    """An UNAVAILABLE that is worth sending to the shard's current leader: the node we asked
    was not its leader any more, or nothing answered at the address."""
    if e.code() is not grpc.StatusCode.UNAVAILABLE:
        return False
    return not answered_by_a_node(e) or any(k == RETRY_HEADER for k, _ in trailing_metadata(e))


def not_leader_here(node_id: str, shard: int) -> CallFailed:
    return CallFailed(
        grpc.StatusCode.UNAVAILABLE,
        f"node {node_id} does not lead shard {shard} (leadership moved); retry with its new leader",
        retry=True,
    )


class Router:
    """Finds a shard's leader and talks to it: one long-lived channel per peer address.

    Lives on the API server's event loop; ``blocking`` runs the local part of a call
    (a store read or write) on the server's pool."""

    def __init__(
        self,
        backend: Backend,
        own_address: str,
        security: ChannelSecurity | None = None,
        *,
        pool: Executor | None = None,
        options: tuple = CHANNEL_OPTIONS,
        seal: Seal | None = None,
    ):
        self.backend = backend
        self.seal = seal or node_local_seal()  # the cluster's: what makes a forwarded marker count
        self.security = security  # forwarding presents the same credentials as any caller
        self.own_address = own_address
        self.pool = pool
        self.options = options
        # This node's own secret: in its own header when forwarding a caller's call (the leader caps the
        # caller's scope by it), and as the bearer of the calls the node makes for itself (watch fan-in).
        self.node_metadata = token_metadata(security)
        self._node_header = ((NODE_TOKEN_HEADER, f"Bearer {security.token}"),) if security and security.token else ()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pb_grpc.SchedulerStub] = {}
        self.closed = threading.Event()
        # Tracing on: the current span's W3C trace context, sent with a forwarded call (api/tracing.py).
        self.trace_metadata: Callable[[], tuple[tuple[str, str], ...]] | None = None

    def forward_metadata(self) -> tuple[tuple[str, str], ...]:
        """What a call forwarded for the caller being served carries: that it was forwarded, the CALLER's
        secret (never this node's: that would widen the call), and this node's own in its own header."""
        secret = caller_secret()
        caller = ((AUTHORIZATION, f"Bearer {secret}"),) if secret else ()
        trace = self.trace_metadata() if self.trace_metadata is not None else ()
        return (self.seal.marker(secret),) + caller + self._node_header + trace

    def own_metadata(self) -> tuple[tuple[str, str], ...]:
        """What a call this node makes for itself carries (a tick watch's fan-in feed, which serves every
        watcher here, each filtered by its own caller's scope): this node's secret as the caller's too."""
        own = self.security.token if self.security else None
        return (self.seal.marker(own),) + self.node_metadata + self._node_header

    async def blocking(self, fn: Callable[..., T], *args) -> T:
        # With the caller's context (api/auth.py's caller()), which run_in_executor does not pass on.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.pool, context.run, fn, *args)

    def on_pool(self, fn: Callable[[int], T]) -> Callable[[int], Awaitable[T]]:
        """``fn(fence)``, which blocks on the store, as a ``local`` for ``call``: run on the pool."""
        return lambda fence: self.blocking(fn, fence)

    def stub(self, address: str) -> pb_grpc.SchedulerStub:
        if self.closed.is_set():
            raise CallFailed(grpc.StatusCode.UNAVAILABLE, f"node {self.backend.node_id} is stopping")
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._channels[address] = open_aio_channel(address, self.security, self.options)
            stub = self._stubs[address] = pb_grpc.SchedulerStub(channel)
        return stub

    async def close(self) -> None:
        self.closed.set()
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for ch in channels:
            await ch.close(grace=None)

    def leader_elsewhere(self, shard: int) -> str | None:
        """The shard leader's address if it is another node, else None (no leader, or it is us)."""
        addr = self.backend.leader_address(shard)
        return addr if addr and addr != self.own_address else None

    async def call(
        self,
        shard: int,
        context: grpc.aio.ServicerContext,
        local: Callable[[int], Awaitable[T]],
        remote: Callable[[pb_grpc.SchedulerStub, float, tuple], Awaitable[T]],
    ) -> T:
        """``await local(fence)`` if this node leads ``shard``, else ``await remote(stub, timeout, metadata)``
        on its leader; retried while the shard has no reachable leader, within the deadline. A ``local`` that
        blocks is passed as ``on_pool(fn)``."""
        deadline = Deadline.of(context)
        forwarded = is_forwarded(context)
        node_id = self.backend.node_id
        why = None  # the last reason the call could not be served, for the final message
        while True:
            fence = self.backend.fence_if_leader(shard)
            if fence is not None:
                try:
                    answer = await local(fence)
                    sent_elsewhere(False)
                    return answer
                except (FencedOut, NotLeader) as e:
                    if forwarded:
                        raise not_leader_here(node_id, shard) from e
                    why = f"leadership moved during the call ({e})"
            elif forwarded:
                raise not_leader_here(node_id, shard)
            else:
                addr = self.backend.leader_address(shard)
                if not addr:
                    why = None
                elif addr == self.own_address:
                    why = "this node is taking the shard over"
                else:
                    try:
                        answer = await remote(
                            self.stub(addr), max(deadline.remaining(), 0.001), self.forward_metadata()
                        )
                        sent_elsewhere()  # the leader applied it, and audit-logs it
                        return answer
                    except grpc.RpcError as e:
                        code = e.code()
                        if leader_moved(e):
                            why = why_not_served(addr, e)
                        elif code is grpc.StatusCode.DEADLINE_EXCEEDED and deadline.remaining() <= 0.01:
                            why = f"its leader at {addr} did not answer in time"
                        else:
                            raise CallFailed(code, e.details() or "") from None
            if not await deadline.wait_to_retry(self.closed):
                break
        raise CallFailed(grpc.StatusCode.UNAVAILABLE, unavailable_message(shard, why, deadline.elapsed()), retry=True)


def why_not_served(addr: str, e: grpc.RpcError) -> str:
    """A forwarded call's retryable failure, for the final UNAVAILABLE message."""
    details = (e.details() or "").strip()
    if len(details) > 160:
        details = details[:157] + "..."
    if answered_by_a_node(e):
        return f"its leader at {addr} answered: {details}"
    return f"its leader at {addr} does not answer (failover in progress?): {details}"


def unavailable_message(shard: int, why: str | None, elapsed_s: float) -> str:
    if why is None:
        return f"shard {shard} has no leader (failover in progress); retried for {elapsed_s:.1f}s"
    return f"shard {shard}: {why}; retried for {elapsed_s:.1f}s"
