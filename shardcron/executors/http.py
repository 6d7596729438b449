"""Runs a tick as one HTTP request, with httpx, on the node's asyncio loop (``aio.LoopThread``).

Connections: one ``httpx.AsyncClient`` per node, made on the first request
and closed when the node stops (``Executors`` makes this executor once, with
the node's loop), so every tick to one origin (scheme, host, port) reuses the
connections the ones before it opened instead of paying a TCP and TLS
handshake each:
- keep-alive: up to ``MAX_KEEPALIVE`` (32) idle connections are kept, each for
  ``KEEPALIVE_EXPIRY_S`` (4 s: shorter than the idle timeout of common servers,
  5 s for Node.js, uvicorn and Apache, so this side closes first and a reused
  connection is rarely one the server is closing). Jobs that fire together
  (the top of a minute) share connections; a job every minute opens a new one.
- at most ``MAX_PER_HOST`` (8) requests in flight to one host:port; the next
  tick to it waits for a slot, within its own timeout ("waiting for a free
  connection"). It bounds what a burst of ticks opens against one service, and
  it keeps httpcore's pool small, which is what its cost grows with: the pool
  checks every idle connection it holds (two syscalls each, each a GIL
  hand-off for the loop thread) on every request. In ``bench dispatch --kind
  http`` at 1,000 jobs/s, 2 to 8 per host served 400-470 ticks/s, 16 per host
  195-330. ``MAX_CONNECTIONS`` (128) bounds them across hosts, above the node's
  64 tick workers, so one slow host never holds back a tick to another.
- HTTP/2 where a TLS server offers it by ALPN: every tick to that origin is a
  stream on one connection. Plain http:// stays HTTP/1.1 (no h2c upgrade).

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

Cancel: ``run`` returns within ``CANCEL_POLL_S`` of ``cancel`` being set (the
node lost the shard or is stopping), and the request is cancelled on the
loop: its connection is closed (HTTP/1.1) or its stream reset (HTTP/2).

Choices beyond "send the request, ok iff 2xx":
- Redirects are not followed: a 3xx is reported as it is (ok=False). Following
  one would resend secret headers and the idempotency key to another URL.
- Only http:// and https:// are requested. The standard proxy variables
  (http_proxy, https_proxy, all_proxy, no_proxy) are honoured.
- TLS trusts the system's store (``ssl.create_default_context()``, which reads
  SSL_CERT_FILE and SSL_CERT_DIR), as urllib did, not certifi's bundle.
- ``X-Shardcron-*`` and ``Idempotency-Key`` belong to shardcron: user headers
  with those names are dropped, so a job cannot forge them.
- A non-empty body without a user Content-Type is sent as
  ``text/plain; charset=utf-8``.
- Header values are sent as UTF-8 bytes, so a non-ASCII job id still runs.
- No cookie is kept: the client is shared by every job of the node, and one
  job's Set-Cookie must not ride along with another's request.
- ``Accept-Encoding: identity`` unless the job sets its own, as urllib sent:
  no compression to undo on either side for an output of at most 64 KiB.
- A user and password in the URL are sent as Basic authentication (httpx), and
  never shown: messages name ``host:port`` only.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import ssl
import threading

import httpx

from shardcron import __version__
from shardcron.executors.aio import Cancelled, LoopThread
from shardcron.executors.base import now_ms, truncate_output
from shardcron.executors.http_errors import Limits, Phase, explain, limits_for, target_of, timed_out, url_problem
from shardcron.executors.identity import with_tick_headers
from shardcron.headers import MASK
from shardcron.model import OUTPUT_LIMIT_BYTES, ExecutionResult, ExecutorSpec, HttpSpec, TickContext

CONNECT_TIMEOUT_S = 5.0
MAX_PER_HOST = 8
MAX_CONNECTIONS = 128
MAX_KEEPALIVE = 32
KEEPALIVE_EXPIRY_S = 4.0
_CLOSE_TIMEOUT_S = 5.0


def request_headers(spec: HttpSpec, ctx: TickContext) -> dict[str, str]:
    """User headers, minus any that would shadow shardcron's, plus shardcron's."""
    headers = with_tick_headers(spec.headers, ctx)
    if spec.body and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "text/plain; charset=utf-8"
    return headers


class HttpExecutor:
    """``loop``: the node's shared loop. Without one the executor makes its own, and ``close()`` ends it.

    ``connect_timeout_s`` and ``read_timeout_s`` (None: the job's timeout) are the limits described above.
    """

    def __init__(self, loop: LoopThread | None = None, *, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 read_timeout_s: float | None = None, max_per_host: int = MAX_PER_HOST) -> None:
        self._own_loop = loop is None
        self._loop = LoopThread("shardcron-http-loop") if loop is None else loop
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_per_host = max_per_host
        self._hosts: dict[str, asyncio.Semaphore] = {}  # target -> its slots; used on the loop only
        self._lock = threading.Lock()
        self._http: httpx.AsyncClient | None = None
        self._closed = False

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: threading.Event) -> ExecutionResult:
        started = now_ms()

        def failed(error: str) -> ExecutionResult:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

        s = spec.http
        if s is None:
            return failed("invalid job: an http executor needs a url")
        if cancel.is_set():
            return failed("cancelled: before the request was sent")
        if problem := url_problem(s.url):
            return failed(_scrub(f"invalid request: {problem}", s.url))
        target = target_of(s.url)
        try:
            client = self._client()
        except RuntimeError as e:  # closed: the node is stopping
            return failed(f"cancelled: {e}")
        limits = limits_for(timeout_s, self._connect_timeout_s, self._read_timeout_s)
        phase = Phase()
        # UTF-8 bytes: httpx would encode a str value as ASCII and refuse a job id in Japanese, say.
        headers = {name: value.encode("utf-8") for name, value in request_headers(s, ctx).items()}
        body = s.body.encode("utf-8") if s.body else None
        try:
            status, reason, output = self._loop.run(
                lambda: self._exchange(client, target, s.method, s.url, headers, body, limits, phase, cancel),
                limits.total, cancel)
        except Cancelled:
            return failed(f"cancelled: abandoned {s.method} to {target} (this node lost the shard or is stopping)")
        except TimeoutError:
            return failed(timed_out(limits, phase, s.method, target))
        except Exception as e:  # noqa: BLE001 - every failure is a result, never an exception
            return failed(_scrub(explain(e, limits, phase, s.method, target), s.url))
        ok = 200 <= status < 300
        return ExecutionResult(ok=ok, started_at_ms=started, finished_at_ms=now_ms(), http_status=status,
                               output=truncate_output(output),
                               error=None if ok else f"HTTP {status} {reason}".rstrip())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._http = self._http, None
        if client is not None:
            try:
                self._loop.run(client.aclose, _CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the node is stopping; a connection that will not close is dropped
                pass
        if self._own_loop:
            self._loop.close()

    async def _exchange(self, client: httpx.AsyncClient, target: str, method: str, url: str,
                        headers: dict[str, bytes], body: bytes | None, limits: Limits,
                        phase: Phase, cancel: threading.Event) -> tuple[int, str, bytes]:
        slots = self._hosts.get(target)
        if slots is None:
            slots = self._hosts[target] = asyncio.Semaphore(self._max_per_host)
        async with slots:
            # A tick may wait here for a free connection: only start if the shard and the lease
            # still allow it (a node paused while it waited must not send after waking).
            if cancel.is_set():
                raise Cancelled("cancelled while waiting for a free connection")
            return await _exchange(client, method, url, headers, body, limits, phase)

    def _client(self) -> httpx.AsyncClient:
        with self._lock:
            if self._closed:
                raise RuntimeError("the node is stopping: no new HTTP requests")
            if self._http is None:
                self._http = _make_client()
            return self._http


def _make_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        http2=True,
        verify=ssl.create_default_context(),
        limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE,
                            keepalive_expiry=KEEPALIVE_EXPIRY_S),
        follow_redirects=False,
        trust_env=True,
        cookies=http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
        headers={"User-Agent": f"shardcron/{__version__}", "Accept-Encoding": "identity"},
    )


async def _exchange(client: httpx.AsyncClient, method: str, url: str, headers: dict[str, bytes],
                    body: bytes | None, limits: Limits, phase: Phase) -> tuple[int, str, bytes]:
    """One request on the loop: status, reason and at most OUTPUT_LIMIT_BYTES of the body."""
    request = client.build_request(method, url, headers=headers, content=body, timeout=limits.as_httpx(),
                                   extensions={"trace": phase.trace})
    response = await client.send(request, stream=True)
    try:
        kept = bytearray()
        async for chunk in response.aiter_bytes():
            kept += chunk
            if len(kept) >= OUTPUT_LIMIT_BYTES:
                break  # only what will be kept is read; closing drops the rest (and that connection)
        return response.status_code, response.reason_phrase, bytes(kept[:OUTPUT_LIMIT_BYTES])
    finally:
        await response.aclose()


def _scrub(message: str, url: str) -> str:
    """``message`` without the URL's password, should an exception have quoted the URL."""
    try:
        password = httpx.URL(url).password
    except Exception:  # noqa: BLE001 - a URL httpx cannot parse: look for the password by hand
        netloc = url.partition("://")[2].partition("/")[0]
        userinfo = netloc.rpartition("@")[0]
        password = userinfo.partition(":")[2] if ":" in userinfo else None
    return message.replace(password, MASK) if password else message
