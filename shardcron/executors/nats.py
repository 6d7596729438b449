"""Publishes a tick to NATS with nats-py, on the node's shared asyncio loop (``aio.LoopThread``).

``run_async`` runs on the loop itself. A JetStream publish goes out with
``publish_async`` on the connection's one JetStream context, so the ticks of a
burst are written together by nats-py's flusher and their PubAcks come back
on one reply subscription, each to its own tick (a refused one fails that
tick alone).

``jetstream = true`` (the default) publishes to a JetStream stream and waits
for its PubAck: the ack, not the send, is the success. The message carries
``Nats-Msg-Id: <job_id>:<scheduled_at_ms>`` (the slot's idempotency key), so
when a retry or a successor leader publishes the same slot again, the stream
drops the copy and answers ``duplicate``, which is reported as a success. That
holds only inside the stream's ``duplicate_window`` (2 minutes unless the
stream says otherwise): a copy published later than that after the first is
stored again. For a retry to be dropped in every case the window must exceed
the job's catch-up window (a successor may retry an orphaned slot that late),
e.g. ``nats stream edit NAME --dupe-window 2h``. The stream's window is looked
up once per (URL, stream), off the tick's path, and a retry published later
after its slot than the window is logged once as a warning.

``jetstream = false`` is a core NATS publish plus a flush (PING/PONG): the
server has the message, but nothing stores it and no consumer acknowledges
it. At-most-once delivery, and the output says so.

Headers: ``identity.tick_headers`` (``X-Shardcron-*``, ``Idempotency-Key``)
and ``Nats-Msg-Id`` belong to shardcron; user headers with those names are
dropped, so a job cannot forge them.

Connections: one per URL, pooled in ``Connections``. nats-py retries a failed
connect up to 60 times, 2 s apart, by default; here a connect is bounded by
``min(timeout, 5 s)`` all told (nats-py cannot be told to try only once), and
a client that loses its server closes instead of reconnecting in the
background while ticks wait on it. The next tick finds it closed and
connects afresh.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import nats
from nats.errors import Error as NatsError
from nats.js.errors import APIError, NoStreamResponseError

from shardcron.abc import Cancel
from shardcron.executors.aio import Cancelled, LoopThread, OnTheLoop
from shardcron.executors.base import now_ms, truncate_output
from shardcron.executors.connections import Connections
from shardcron.executors.identity import with_tick_headers
from shardcron.model import ExecutionResult, ExecutorSpec, NatsSpec, TickContext
from shardcron.spec.headers import mask_url

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"

# A dead broker must fail a tick fast and never hold up the other shards' ticks.
CONNECT_TIMEOUT_S = 5.0
_CLOSE_TIMEOUT_S = 5.0
_STREAM_INFO_TIMEOUT_S = 5.0


def message_headers(spec: NatsSpec, ctx: TickContext) -> dict[str, str]:
    """User headers, minus any that would shadow shardcron's, plus shardcron's and ``Nats-Msg-Id``."""
    headers = with_tick_headers(spec.headers, ctx, also_reserved=frozenset({MSG_ID.lower()}))
    headers[MSG_ID] = ctx.idempotency_key
    return headers


class NatsExecutor(OnTheLoop):
    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        super().__init__(connections, loop, "shardcron-nats")
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], float | None] = {}  # (url, stream) -> duplicate_window seconds
        self._warned: set[tuple[str, str]] = set()
        self._connecting: dict[str, asyncio.Future] = {}  # url -> its connect, shared by the ticks waiting on it
        self._jetstreams: dict[int, tuple] = {}  # id(connection) -> (connection, its JetStream context)

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        started = now_ms()

        def failed(error: str) -> ExecutionResult:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

        s = spec.nats
        if s is None:
            return failed("invalid job: a nats executor needs a url and a subject")
        if cancel.is_set():
            return failed("cancelled: before the message was published")
        where = mask_url(s.url)
        deadline = time.monotonic() + timeout_s
        try:
            with self._loop.cancelled_by(cancel):
                nc = await self._client(s.url, min(timeout_s, CONNECT_TIMEOUT_S))
        except Cancelled:
            return failed(f"cancelled: while connecting to NATS at {where} (this node lost the shard or is stopping)")
        except RuntimeError as e:  # the pool is closed: the node is stopping
            return failed(f"cancelled: {e}")
        except Exception as e:  # noqa: BLE001 - refused, timed out, TLS, auth, a bad URL: every one is a result
            return failed(f"cannot connect to NATS at {where}: {_reason(e)}")

        headers = message_headers(s, ctx)
        body = s.body.encode("utf-8")
        kind = "JetStream publish" if s.jetstream else "publish"
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            with self._loop.cancelled_by(cancel):
                async with asyncio.timeout(remaining):
                    if s.jetstream:
                        ack = await _js_publish(self._jetstream(nc), s.subject, body, headers)
                    else:
                        await _core_publish(nc, s.subject, body, headers, remaining)
        except Cancelled:
            return failed(
                f"cancelled: abandoned the {kind} to {s.subject} at {where} "
                "(this node lost the shard or is stopping)" + _maybe_stored(s)
            )
        except TimeoutError:
            # Maybe a slow server, maybe a dead TCP connection that nats-py would notice only after
            # minutes of unanswered pings: the next tick starts from a fresh connection either way.
            self._discard(s.url, nc)
            return failed(
                f"timed out after {timeout_s:g}s waiting for the {kind} to {s.subject} at {where}" + _maybe_stored(s)
            )
        except NoStreamResponseError:
            return failed(
                f"no JetStream stream stores subject {s.subject} at {where}: create a stream covering it "
                f"(e.g. nats stream add --subjects '{s.subject}'), or set jetstream = false for an "
                "at-most-once core NATS publish"
            )
        except APIError as e:
            return failed(f"JetStream refused the publish to {s.subject} at {where}: {_api_reason(e)}")
        except Exception as e:  # noqa: BLE001 - connection closed, bad header, payload too big...: a result
            self._discard(s.url, nc)  # it may be broken: the next tick reconnects
            return failed(f"{kind} to {s.subject} at {where} failed: {_reason(e)}")

        finished = now_ms()
        if not s.jetstream:
            output = (
                f"published to NATS subject {s.subject} at {where} (core NATS, at-most-once delivery: "
                "the server took it, but no stream or consumer acknowledged it)"
            )
        elif ack.duplicate:
            output = (
                f"duplicate: already published to JetStream stream {ack.stream} (seq {ack.seq}) with "
                f"{MSG_ID} {ctx.idempotency_key} (JetStream dropped it within its duplicate window)"
            )
        else:
            output = (
                f"published to JetStream stream {ack.stream} (seq {ack.seq}) on subject {s.subject} at {where}, "
                f"{MSG_ID} {ctx.idempotency_key}"
            )
        if s.jetstream:
            self._check_window(nc, s.url, ack.stream, ctx)
        return ExecutionResult(
            ok=True, started_at_ms=started, finished_at_ms=finished, output=truncate_output(output.encode("utf-8"))
        )

    async def _client(self, url: str, timeout_s: float):
        """The pooled connection to ``url``, connecting once for every tick that asks meanwhile."""
        key = ("nats", url)
        for _ in range(2):
            nc = self._connections.find(key)
            if nc is None:
                connecting = self._connecting.get(url)
                if connecting is None:
                    connecting = self._connecting[url] = asyncio.ensure_future(self._connect_and_pool(url, timeout_s))
                    connecting.add_done_callback(
                        lambda f: self._connecting.pop(url, None) and (f.cancelled() or f.exception())
                    )
                # shielded: a tick cancelled while it waits leaves the connect to the others
                nc = await asyncio.shield(connecting)
            if nc.is_connected:
                return nc
            # Closed since it was pooled (its server went away): replace it.
            self._discard(url, nc)
        raise _ConnectFailed("the connection closed as soon as it was made")

    async def _connect_and_pool(self, url: str, timeout_s: float):
        # nats-py makes two attempts of up to timeout_s each; the bound cuts the second one short.
        async with asyncio.timeout(timeout_s + 0.5):
            nc = await _connect(url, timeout_s)
        return self._connections.put(("nats", url), nc, self._close)

    def _close(self, nc) -> None:
        self._jetstreams.pop(id(nc), None)
        self._loop.finish(nc.close, _CLOSE_TIMEOUT_S)

    def _discard(self, url: str, nc) -> None:
        self._connections.discard(("nats", url), nc)

    def _jetstream(self, nc):
        """One JetStream context per connection: its publish_async acks come back on one reply subscription."""
        js = self._jetstreams.get(id(nc))
        if js is None or js[0] is not nc:
            js = self._jetstreams[id(nc)] = (nc, nc.jetstream())
        return js[1]

    # -- duplicate window ------------------------------------------------------------------

    def _check_window(self, nc, url: str, stream: str, ctx: TickContext) -> None:
        """Warn (once per URL and stream) when a retry comes later after its slot than the stream's window.

        The window is looked up once, on the loop, without holding up this tick.
        """
        key = (url, stream)
        with self._lock:
            known = key in self._windows
            if not known:
                self._windows[key] = None  # looking it up
        if known:
            self._warn_if_late(key, ctx)
            return
        future = asyncio.run_coroutine_threadsafe(self._look_up_window(nc, key, ctx), self._loop.loop)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: never "never retrieved"

    async def _look_up_window(self, nc, key: tuple[str, str], ctx: TickContext) -> None:
        try:
            info = await nc.jetstream(timeout=_STREAM_INFO_TIMEOUT_S).stream_info(key[1])
            window = float(info.config.duplicate_window or 0) or None
        except Exception as e:  # noqa: BLE001 - only advice: the account may not allow STREAM.INFO
            log.info(
                "could not read JetStream stream %s's duplicate window at %s: %s", key[1], mask_url(key[0]), _reason(e)
            )
            return
        with self._lock:
            self._windows[key] = window
        log.info(
            "JetStream stream %s at %s drops a repeated %s for %gs; a slot retried later than that is stored "
            "again: keep duplicate_window above the jobs' catch-up window",
            key[1],
            mask_url(key[0]),
            MSG_ID,
            window or 0,
        )
        self._warn_if_late(key, ctx)

    def _warn_if_late(self, key: tuple[str, str], ctx: TickContext) -> None:
        with self._lock:
            window = self._windows.get(key)
            if window is None or ctx.attempt <= 1 or key in self._warned:
                return
            late_s = (now_ms() - ctx.scheduled_at_ms) / 1000.0
            if late_s < window:
                return
            self._warned.add(key)
        log.warning(
            "JetStream stream %s at %s: %s@%d attempt %d was published %.0fs after its slot, beyond the "
            "stream's duplicate_window of %gs, so an earlier attempt's copy may not be dropped; make the "
            "stream's duplicate_window longer than the job's catch-up window (warned once per stream)",
            key[1],
            mask_url(key[0]),
            ctx.job_id,
            ctx.scheduled_at_ms,
            ctx.attempt,
            late_s,
            window,
            extra={"job": ctx.job_id, "shard": ctx.shard, "fence": ctx.fence},
        )


class _ConnectFailed(Exception):
    """nats-py gave up connecting; carries the last reason it reported."""


async def _connect(url: str, timeout_s: float):
    errors: list[BaseException] = []

    async def on_error(e: BaseException) -> None:
        # nats-py's default callback logs a traceback; a broker error is reported by the tick instead.
        errors.append(e)
        log.debug("nats %s: %s", mask_url(url), _reason(e))

    try:
        return await nats.connect(
            url,
            name="shardcron",
            connect_timeout=timeout_s,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=on_error,
        )
    except NatsError as e:
        raise _ConnectFailed(_reason(errors[-1]) if errors else _reason(e)) from None


async def _js_publish(js, subject: str, body: bytes, headers: dict[str, str]):
    # publish_async sends the message and returns a future for its PubAck: the ticks of one loop
    # turn go out in one write of nats-py's flusher, and their acks are awaited together. No wait_stall:
    # the caller's asyncio.timeout bounds a stall already, and nats-py waits for a stall with
    # asyncio.wait_for, a task of its own per message when it is given a timeout.
    acked = await js.publish_async(subject, body, headers=headers)
    return await acked


async def _core_publish(nc, subject: str, body: bytes, headers: dict[str, str], timeout_s: float) -> None:
    await nc.publish(subject, body, headers=headers)
    await nc.flush(timeout=timeout_s)  # PING/PONG: the server has read everything sent before it


def _maybe_stored(s: NatsSpec) -> str:
    if not s.jetstream:
        return ""
    return f" (the stream may have stored it; a retry with the same {MSG_ID} is dropped within its duplicate window)"


def _api_reason(e: APIError) -> str:
    return f"{e.description or 'error'} (code {e.code}, err_code {e.err_code})"


def _reason(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, TimeoutError) and not str(e):
        return "no answer in time"
    text = " ".join(str(e).split())
    return text or type(e).__name__
