"""Runs a tick as one HTTP request, with urllib.request.

How cancel and timeout interrupt a request: the request runs in a small daemon
thread while the calling thread waits for it, for ``cancel`` and for the
deadline. On cancel or timeout the caller returns at once and breaks the
request off by shutting down its socket (``shutdown()`` wakes a thread blocked
in ``recv``; ``close()`` from another thread would not be safe), so the
abandoned thread ends promptly instead of hanging on until a socket timeout.
A request still inside ``connect()`` cannot be reached that way; the socket
timeout (the job's timeout) bounds it, and it is dropped as soon as it connects.

Choices beyond "send the request, ok iff 2xx":
- Redirects are not followed: a 3xx is reported as it is (ok=False). Following
  one would resend secret headers and the idempotency key to another URL, and
  urllib turns a redirected POST into a GET.
- Only http:// and https:// are opened (no file://, ftp://, data:); the
  standard proxy variables (http_proxy, https_proxy, no_proxy) are honoured.
- ``X-Shardcron-*`` and ``Idempotency-Key`` belong to shardcron: user headers
  with those names are dropped, so a job cannot forge them.
- A non-empty body without a user Content-Type is sent as
  ``text/plain; charset=utf-8`` (urllib would claim a form).
- Header values are sent as UTF-8 bytes, so a non-ASCII job id still runs.
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from shardcron import __version__
from shardcron.executors.base import CANCEL_POLL_S, now_ms, truncate_output
from shardcron.executors.identity import with_tick_headers
from shardcron.model import OUTPUT_LIMIT_BYTES, ExecutionResult, ExecutorSpec, HttpSpec, TickContext

# Thread names make an abandoned request easy to spot in a thread dump.
REQUEST_THREAD_NAME = "shardcron-http-request"


def request_headers(spec: HttpSpec, ctx: TickContext) -> dict[str, str]:
    """User headers, minus any that would shadow shardcron's, plus shardcron's."""
    headers = with_tick_headers(spec.headers, ctx)
    if spec.body and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "text/plain; charset=utf-8"
    return headers


class HttpExecutor:
    def __init__(self) -> None:
        self._opener = _build_opener()

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: threading.Event) -> ExecutionResult:
        started = now_ms()
        if spec.http is None:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(),
                                   error="invalid job: an http executor needs a url")
        if cancel.is_set():
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(),
                                   error="cancelled: before the request was sent")
        http_spec = spec.http
        target = _target(http_spec.url)
        exchange = _Exchange()
        try:
            request = _Request(
                http_spec.url,
                data=http_spec.body.encode("utf-8") if http_spec.body else None,
                # UTF-8 bytes: http.client would refuse a str value outside latin-1
                # (a job id in Japanese, say); ASCII values are unchanged.
                headers={name: value.encode("utf-8") for name, value in request_headers(http_spec, ctx).items()},
                method=http_spec.method,
                abort=exchange.abort,
            )
        except ValueError as e:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(),
                                   error=f"invalid request: {e}")

        deadline = time.monotonic() + timeout_s
        try:
            threading.Thread(
                target=exchange.perform, args=(self._opener, request, max(timeout_s, 0.001)),
                name=REQUEST_THREAD_NAME, daemon=True,
            ).start()
        except RuntimeError as e:  # out of threads
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(),
                                   error=f"could not start the request thread: {e}")
        while not exchange.done.is_set():
            remaining = deadline - time.monotonic()
            if cancel.is_set() or remaining <= 0:
                exchange.abort.abort()
                error = (
                    f"cancelled: abandoned {http_spec.method} to {target} (this node lost the shard or is stopping)"
                    if cancel.is_set()
                    else f"timed out after {timeout_s:g}s waiting for {http_spec.method} to {target}"
                )
                return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(),
                                       http_status=exchange.status, error=error)
            exchange.done.wait(min(remaining, CANCEL_POLL_S))

        finished = now_ms()
        output = truncate_output(exchange.body)
        if exchange.error is not None:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=finished, http_status=exchange.status,
                                   output=output, error=_explain(exchange.error, target, timeout_s))
        status = exchange.status
        ok = status is not None and 200 <= status < 300
        return ExecutionResult(ok=ok, started_at_ms=started, finished_at_ms=finished, http_status=status,
                               output=output, error=None if ok else f"HTTP {status} {exchange.reason}".rstrip())


class _Exchange:
    """One request's outcome, filled in by the request thread."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.abort = _Abort()
        self.status: int | None = None
        self.reason = ""
        self.body = b""
        self.error: BaseException | None = None

    def perform(self, opener: urllib.request.OpenerDirector, request: urllib.request.Request, timeout: float) -> None:
        try:
            with opener.open(request, timeout=timeout) as response:
                self.status, self.reason = response.status, response.reason or ""
                # Only what will be kept is read; closing drops the rest.
                self.body = response.read(OUTPUT_LIMIT_BYTES)
        except Exception as e:  # every failure is a result, never an exception
            self.error = e
        finally:
            self.done.set()


class _Abort:
    """Lets the waiting thread break off a request running in another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._connections: list[http.client.HTTPConnection] = []

    @property
    def aborted(self) -> bool:
        return self._aborted

    def adopt(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if self._aborted:
                raise ConnectionAbortedError("request abandoned")
            self._connections.append(connection)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            connections = list(self._connections)
        for connection in connections:
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed, or not connected yet


class _AbortableConnection:
    """Mixed into http.client's connections: registers with an ``_Abort``."""

    def __init__(self, *args, abort: _Abort, **kwargs):
        super().__init__(*args, **kwargs)
        abort.adopt(self)
        create = self._create_connection

        def create_then_check(*a, **kw):
            sock = create(*a, **kw)
            if abort.aborted:  # abandoned while connecting: don't go on to send
                sock.close()
                raise ConnectionAbortedError("request abandoned")
            return sock

        self._create_connection = create_then_check


class _HTTPConnection(_AbortableConnection, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_AbortableConnection, http.client.HTTPSConnection):
    pass


class _Request(urllib.request.Request):
    def __init__(self, *args, abort: _Abort, **kwargs):
        super().__init__(*args, **kwargs)
        self.abort = abort


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(functools.partial(_HTTPConnection, abort=req.abort), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(functools.partial(_HTTPSConnection, abort=req.abort), req, context=self._context)


def _build_opener() -> urllib.request.OpenerDirector:
    # Built by hand rather than with build_opener() to leave out the redirect
    # and HTTP-error handlers (any status comes back as a response) and every
    # scheme but http and https.
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTPHandler(),
        _HTTPSHandler(context=ssl.create_default_context()),
        urllib.request.UnknownHandler(),
    ):
        opener.add_handler(handler)
    opener.addheaders = [("User-Agent", f"shardcron/{__version__}")]
    return opener


def _target(url: str) -> str:
    """host:port of a URL, for error messages (no credentials, path nor query)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, "?")
    except ValueError:
        return "an invalid URL"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _explain(exc: BaseException, target: str, timeout_s: float) -> str:
    """A one-line reason for a failed request."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason  # urllib wraps errors raised while connecting and sending
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout_s:g}s talking to {target}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {target}"
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup failed for {target}: {exc.strerror or exc}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed for {target}: {exc.verify_message or exc}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error with {target}: {exc.reason or exc}"
    if isinstance(exc, http.client.RemoteDisconnected):
        return f"{target} closed the connection without answering"
    if isinstance(exc, ConnectionResetError):
        return f"connection reset by {target}"
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP response from {target}: {type(exc).__name__}: {exc}"
    if isinstance(exc, urllib.error.URLError):
        return f"request to {target} failed: {exc.reason}"
    if isinstance(exc, OSError):
        return f"request to {target} failed: {exc.strerror or exc}"
    if isinstance(exc, ValueError):
        return f"invalid request: {exc}"
    return f"request to {target} failed: {type(exc).__name__}: {exc}"
