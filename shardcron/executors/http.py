"""Runs a tick as one HTTP request, on the node's asyncio loop (``aio.LoopThread``).

``run_async`` is the tick: a coroutine the scheduler awaits on the loop, one
per tick. ``run`` waits for it from a worker thread. Either way every failure
is an ``ExecutionResult(ok=False, error=...)``, never an exception.

Two clients, chosen by the URL's scheme, each made on the first request that
needs it and closed with the executor (``Executors`` makes this executor once
per node, with the node's loop):
- http:// goes through aiohttp (``http_aiohttp``), HTTP/1.1 with keep-alive:
  plain HTTP never speaks HTTP/2 here (no h2c upgrade), and aiohttp costs a
  fifth of httpx's client CPU per request (why and the figures:
  ``docs/adr/0005-ticks-on-one-event-loop.md``).
- https:// goes through httpx (``http_httpx``), for HTTP/2 where a TLS server
  offers it by ALPN: every tick to that origin is a stream on one connection.

Connections: every tick to one origin (scheme, host, port) reuses the ones the
ticks before it opened instead of paying a TCP (and TLS) handshake each:
- keep-alive: an idle connection is kept ``KEEPALIVE_EXPIRY_S`` (4 s: shorter
  than the idle timeout of common servers, 5 s for Node.js, uvicorn and
  Apache, so this side closes first and a reused connection is rarely one the
  server is closing); httpx keeps at most ``MAX_KEEPALIVE`` (32) idle ones.
  Jobs that fire together (the top of a minute) share connections; a job
  every minute opens a new one.
- at most ``MAX_PER_HOST`` (8) requests in flight to one host:port; the next
  tick to it waits for a slot, within its own timeout ("waiting for a free
  connection"). It bounds what a burst of ticks opens against one service,
  and it keeps httpcore's pool small, which is what its cost grows with. After
  the wait a tick starts only if ``cancel`` still allows it: one that waited
  must not send after its shard or lease was lost. A node's executors raise it
  to the node's ``--executor-slots`` (its gate bounds executions; a smaller pool
  would queue them first-come below the fair queue). ``MAX_CONNECTIONS`` (128, or more)
  bounds each client across hosts, so one slow host never holds back a tick
  to another.

Timeouts: the job's timeout is the total. When it runs out the request is
cancelled on the loop and the error names the phase it was in (connecting, the
TLS handshake, sending, waiting for the answer, reading the body). Within it:
- connect (DNS, TCP connect and TLS handshake): ``CONNECT_TIMEOUT_S`` = 5 s, or
  the total if shorter: a host that does not accept fails fast and the retry
  policy gets the rest of the budget, as for the broker kinds;
- read (the longest wait for a byte of the answer): the total. An endpoint that
  does its work before it answers may be silent for as long as the job allows;
  a shorter default would fail jobs that were given the time;
- write and pool (waiting for a free connection): the total.

Cancel: once ``cancel`` is set (the node lost the shard or its lease, or is
stopping) its callback cancels the request on the loop (``aio``'s
``cancelled_by``), with nothing polling it: its connection is closed
(HTTP/1.1) or its stream reset (HTTP/2).

Choices beyond "send the request, ok iff 2xx", the same for both clients:
- Redirects are not followed: a 3xx is reported as it is (ok=False). Following
  one would resend secret headers and the idempotency key to another URL.
- Only http:// and https:// are requested. The standard proxy variables
  (http_proxy, https_proxy, all_proxy, no_proxy) are honoured, read when the
  client is made.
- TLS trusts the system's store (``ssl.create_default_context()``, which reads
  SSL_CERT_FILE and SSL_CERT_DIR), as urllib did, not certifi's bundle.
- ``X-Shardcron-*`` and ``Idempotency-Key`` belong to shardcron: user headers
  with those names are dropped, so a job cannot forge them.
- A non-empty body without a user Content-Type is sent as
  ``text/plain; charset=utf-8``.
- Header values are sent as UTF-8 bytes, so a non-ASCII job id still runs.
- No cookie is kept: a client is shared by every job of the node, and one
  job's Set-Cookie must not ride along with another's request.
- ``Accept-Encoding: identity`` unless the job sets its own, as urllib sent:
  no compression to undo on either side for an output of at most 64 KiB.
- A user and password in the URL are sent as Basic authentication, and never
  shown: messages name ``host:port`` only.
- Only the first ``OUTPUT_LIMIT_BYTES`` of an answer are read and kept.

Where the two clients differ:
- aiohttp resends an idempotent request (GET, HEAD, PUT, DELETE, OPTIONS) once
  when a kept-alive connection fails before any answer (RFC 9112, 9.3.1);
  httpx reports it ("closed the connection without answering"). POST and
  PATCH are never resent.
- aiohttp caches DNS answers for 10 s; httpx looks a host up for each new
  connection.
"""

from __future__ import annotations

import asyncio
import threading

from shardcron.abc import Cancel
from shardcron.executors.aio import Cancelled, LoopThread
from shardcron.executors.base import now_ms, truncate_output
from shardcron.executors.http_aiohttp import AiohttpClient
from shardcron.executors.http_errors import Limits, Phase, explain, limits_for, target_of, url_problem
from shardcron.executors.http_httpx import HttpxClient
from shardcron.executors.http_request import Answer, Request, prepare
from shardcron.model import ExecutionResult, ExecutorSpec, TickContext
from shardcron.spec.headers import scrub_password

CONNECT_TIMEOUT_S = 5.0
MAX_PER_HOST = 8
MAX_CONNECTIONS = 128
MAX_KEEPALIVE = 32
KEEPALIVE_EXPIRY_S = 4.0
_CLOSE_TIMEOUT_S = 5.0
# How much longer than the job's timeout ``run`` waits for the loop: ``run_async`` enforces the
# timeout itself, so only a loop that does not run at all (blocked, stopped) is noticed by this.
_LOOP_MARGIN_S = 5.0
_STOPPING = "cancelled: the node is stopping: no new HTTP requests"


class HttpExecutor:
    """``loop``: the node's shared loop. Without one the executor makes its own, and ``close()`` ends it.

    ``connect_timeout_s`` and ``read_timeout_s`` (None: the job's timeout) are the limits described above.
    """

    def __init__(
        self,
        loop: LoopThread | None = None,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float | None = None,
        max_per_host: int = MAX_PER_HOST,
    ) -> None:
        self._own_loop = loop is None
        self._loop = LoopThread("shardcron-http-loop") if loop is None else loop
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_per_host = max_per_host
        self._hosts: dict[str, asyncio.Semaphore] = {}  # target -> its slots; used on the loop only
        self._lock = threading.Lock()  # the clients are made on the loop and taken by close() from any thread
        self._clients: dict[str, HttpxClient | AiohttpClient] = {}  # scheme -> its client
        self._closed = False

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        """From a thread: ``run_async`` on the loop, waited for. Returns as soon as ``cancel`` is set."""
        started = now_ms()
        if self._closed:  # the loop may be gone with the node: do not start a new one for nothing
            return _failed(started, _STOPPING)
        try:
            return self._loop.run(
                lambda: self.run_async(spec, ctx, timeout_s, cancel), max(timeout_s, 0.0) + _LOOP_MARGIN_S
            )
        except TimeoutError:
            return _failed(
                started, f"timed out after {timeout_s:g}s (the job's timeout): the node's loop did not run it"
            )
        except Cancelled:
            if cancel.is_set():  # the wait here was woken by the cancel itself, before run_async could report it
                what = f"{spec.http.method} request" if spec.http is not None else "request"
                return _failed(started, f"cancelled: abandoned the {what} (this node lost the shard or is stopping)")
            return _failed(started, "cancelled: the node's loop is stopping")

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        """The tick, awaited on the executor's loop."""
        started = now_ms()
        s = spec.http
        if s is None:
            return _failed(started, "invalid job: an http executor needs a url")
        if cancel.is_set():
            return _failed(started, "cancelled: before the request was sent")
        if problem := url_problem(s.url):
            return _failed(started, scrub_password(f"invalid request: {problem}", s.url))
        target = target_of(s.url)
        limits = limits_for(timeout_s, self._connect_timeout_s, self._read_timeout_s)
        phase = Phase()
        try:
            client = self._client_for(s.url)
        except RuntimeError:  # closed: the node is stopping
            return _failed(started, _STOPPING)
        try:
            with self._loop.cancelled_by(cancel):
                async with asyncio.timeout(limits.total):
                    answer = await self._send(client, prepare(s, ctx), target, limits, phase, cancel)
        except Cancelled:
            return _failed(
                started, f"cancelled: abandoned {s.method} to {target} (this node lost the shard or is stopping)"
            )
        except Exception as e:  # noqa: BLE001 - every failure is a result, never an exception
            return _failed(started, scrub_password(explain(e, limits, phase, s.method, target), s.url))
        ok = 200 <= answer.status < 300
        return ExecutionResult(
            ok=ok,
            started_at_ms=started,
            finished_at_ms=now_ms(),
            http_status=answer.status,
            output=truncate_output(answer.output),
            error=None if ok else f"HTTP {answer.status} {answer.reason}".rstrip(),
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        if clients:
            try:
                self._loop.run(lambda: _close_all(clients), _CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the node is stopping; a connection that will not close is dropped
                pass
        if self._own_loop:
            self._loop.close()

    async def _send(
        self,
        client: HttpxClient | AiohttpClient,
        request: Request,
        target: str,
        limits: Limits,
        phase: Phase,
        cancel: Cancel,
    ) -> Answer:
        slots = self._hosts.get(target)
        if slots is None:
            slots = self._hosts[target] = asyncio.Semaphore(self._max_per_host)
        async with slots:
            # A tick may wait here for a free connection: only start if the shard and the lease
            # still allow it (a node paused while it waited must not send after waking).
            if cancel.is_set():
                raise Cancelled("cancelled while waiting for a free connection")
            return await client.exchange(request, limits, phase)

    def _client_for(self, url: str) -> HttpxClient | AiohttpClient:
        """On the loop: the client for ``url``'s scheme, made on first use. RuntimeError once closed."""
        scheme = url.partition(":")[0].lower()
        with self._lock:
            if self._closed:
                raise RuntimeError("the node is stopping")
            client = self._clients.get(scheme)
            if client is None:
                client = self._clients[scheme] = _make_client(scheme, self._max_per_host)
            return client


def _make_client(scheme: str, max_per_host: int) -> HttpxClient | AiohttpClient:
    total = max(MAX_CONNECTIONS, max_per_host)  # one host may use the whole per-host allowance
    if scheme == "https":
        return HttpxClient(max_connections=total, max_keepalive=MAX_KEEPALIVE, keepalive_s=KEEPALIVE_EXPIRY_S)
    return AiohttpClient(max_connections=total, max_per_host=max_per_host, keepalive_s=KEEPALIVE_EXPIRY_S)


async def _close_all(clients: list[HttpxClient | AiohttpClient]) -> None:
    for client in clients:
        await client.aclose()


def _failed(started_ms: int, error: str) -> ExecutionResult:
    return ExecutionResult(ok=False, started_at_ms=started_ms, finished_at_ms=now_ms(), error=error)
