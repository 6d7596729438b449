"""etcd watches as tasks on an event loop (``grpc.aio``), one stream each: no thread of their own.

The library's watcher runs every watch on one synchronous gRPC stream, which
costs three threads for the life of the client: its callback thread, gRPC's
request-iterator thread and gRPC's channel-spinning thread. Here each watch is
a task on the node's loop (``runtime.node_loop``), beside the API and the
ticks; its callbacks run on that loop, so they must not block.

A watch, in states:
- **creating**: the create request is sent; ``start`` waits for etcd's answer
  (at most the client's timeout) and raises if it is an error or no answer;
- **delivering**: each response with events (or a progress notice) is handed
  to ``on_events(revision, events)``;
- **ended**: the stream broke, etcd cancelled the watch, or its start revision
  was compacted away (etcd says so right after creating it): ``on_error(why)``
  is called once and nothing more is delivered. ``cancel()`` ends it
  silently, from any thread; ``close`` ends every watch before its channels.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from pyetcd import etcdrpc
from pyetcd.utils import prefix_range_end

from shardcron.runtime.node_loop import NodeLoop

log = logging.getLogger(__name__)

CALLS_END_WITHIN_S = 0.1  # what gRPC's own per-call tasks are given to end, once the channels are closed


@dataclass(frozen=True)
class Member:
    """Where a watch's stream goes: ``host:port``, with the channel's TLS credentials (None: plain)."""

    netloc: str
    credentials: grpc.ChannelCredentials | None


class WatchCreateFailed(Exception):
    """etcd refused the watch or the stream broke before it was created; ``code``: the stream's gRPC
    status when it broke (None: etcd answered, refusing it)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code


class Watches:
    """The watches of one etcd client, on ``loop``; one ``grpc.aio`` channel per member, kept until ``close``."""

    def __init__(self, loop: NodeLoop, options: Sequence[tuple[str, Any]]) -> None:
        self._loop = loop
        self._options = list(options)
        self._channels: dict[str, grpc.aio.Channel] = {}  # touched on the loop only
        self._streams: set[asyncio.Task[None]] = set()  # likewise

    def start(
        self,
        member: Member,
        metadata: Sequence[tuple[str, str]] | None,
        prefix: str,
        start_revision: int,
        on_events: Callable[[Any], None],
        on_error: Callable[[str], None],
        timeout_s: float,
    ) -> Callable[[], None]:
        """Watch ``prefix`` from ``start_revision`` on ``member``; returns once etcd created the watch, with the
        function that cancels it. ``on_events`` gets each pyetcd ``WatchResponse`` message with events.
        Raises ``WatchCreateFailed`` (with etcd's reason) or ``TimeoutError``."""
        created: concurrent.futures.Future[None] = concurrent.futures.Future()
        cancelled = threading.Event()

        def deliver(resp: Any) -> None:
            if not cancelled.is_set():
                on_events(resp)

        def fail(why: str) -> None:
            if not cancelled.is_set():
                cancelled.set()  # once
                on_error(why)

        request = etcdrpc.WatchRequest(
            create_request=etcdrpc.WatchCreateRequest(
                key=prefix.encode(), range_end=prefix_range_end(prefix.encode()), start_revision=start_revision
            )
        )
        task = asyncio.run_coroutine_threadsafe(
            self._stream(member, metadata, request, created, deliver, fail), self._loop.loop
        )

        def cancel() -> None:
            cancelled.set()
            try:
                self._loop.call_soon(task.cancel)
            except RuntimeError:  # the loop is closed: the stream ended with it
                pass

        try:
            created.result(timeout_s)
        except concurrent.futures.TimeoutError:
            cancel()
            raise TimeoutError(f"etcd did not create the watch within {timeout_s:g}s") from None
        except BaseException:
            cancel()
            raise
        return cancel

    async def _stream(
        self,
        member: Member,
        metadata: Sequence[tuple[str, str]] | None,
        request: Any,
        created: concurrent.futures.Future[None],
        deliver: Callable[[Any], None],
        fail: Callable[[str], None],
    ) -> None:
        task = asyncio.current_task()
        assert task is not None  # run as a task by start()
        self._streams.add(task)
        task.add_done_callback(self._streams.discard)
        call = etcdrpc.WatchStub(self._channel(member)).Watch(metadata=metadata)
        try:
            await call.write(request)
            async for resp in call:
                if resp.created:
                    if resp.compact_revision:
                        raise WatchEnded(f"revision {request.create_request.start_revision} is compacted")
                    if resp.canceled:
                        raise WatchEnded(f"etcd cancelled the watch: {resp.cancel_reason or 'no reason given'}")
                    created.set_result(None)
                    continue
                if resp.compact_revision:
                    raise WatchEnded(f"compacted at revision {resp.compact_revision}")
                if resp.canceled:
                    raise WatchEnded(f"etcd cancelled the watch: {resp.cancel_reason or 'no reason given'}")
                deliver(resp)
            raise WatchEnded("etcd ended the watch stream")
        except asyncio.CancelledError:
            call.cancel()
            if not created.done():
                created.cancel()
            raise
        except Exception as e:  # noqa: BLE001 - the stream's end, or a callback's bug: either way the watch ends
            if not isinstance(e, WatchEnded | grpc.RpcError):
                log.error("a watch callback failed; the watch ends and is made again", exc_info=True)
            why = _why(e)
            call.cancel()
            if created.done():
                fail(why)
            else:
                code = e.code() if isinstance(e, grpc.aio.AioRpcError) else None
                created.set_exception(WatchCreateFailed(why, code))

    def _channel(self, member: Member) -> grpc.aio.Channel:
        channel = self._channels.get(member.netloc)
        if channel is None:
            if member.credentials is None:
                channel = grpc.aio.insecure_channel(member.netloc, options=self._options)
            else:
                channel = grpc.aio.secure_channel(member.netloc, member.credentials, options=self._options)
            self._channels[member.netloc] = channel
        return channel

    def close(self, timeout_s: float) -> None:
        """Close the channels (ending every watch on them); nothing, once the loop has stopped."""
        if not self._loop.running or self._loop.in_loop_thread():
            return
        try:
            self._loop.run(self._close(), timeout_s)
        except (RuntimeError, TimeoutError):  # the loop is going: the channels go with it
            pass

    async def _close(self) -> None:
        streams = list(self._streams)
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)  # ended before the loop may stop
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(grace=None)
        # gRPC ends each call with a task of its own, woken from its poller thread once the call is
        # cancelled; a loop stopped before that would log the task as destroyed while pending.
        await asyncio.sleep(CALLS_END_WITHIN_S)


class WatchEnded(Exception):
    """The stream ended, or etcd ended the watch: the message says why."""


def _why(e: BaseException) -> str:
    return str(e) if isinstance(e, WatchEnded) else error_reason(e)


def error_reason(e: BaseException) -> str:
    """An etcd call's error, for a message: the gRPC status and its details, or the exception."""
    if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
        details = e.details() if hasattr(e, "details") else ""
        return f"{e.code().name}: {details or ''}".strip()
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


__all__ = ["Member", "WatchCreateFailed", "Watches", "error_reason"]
