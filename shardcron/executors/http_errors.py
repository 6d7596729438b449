"""Why an HTTP tick failed, in one line: which phase of the request, which limit, which cause.

A request goes through phases (waiting for a pooled connection, connecting,
the TLS handshake, sending, waiting for the answer, reading its body). Each
client reports them as it goes: httpx to a ``trace`` callback (``Phase.trace``),
aiohttp to a ``TraceConfig`` (``http_aiohttp.phase_tracing``). ``Phase`` keeps
the latest, so a timeout can say where the time ran out.

``explain`` turns an exception of either client into the same kind of sentence
the urllib executor gave (connection refused, DNS, TLS, a timeout naming its
phase and limit). Both wrap the same OS and TLS errors, so the cause under the
wrapping is looked up once for both; only what each names its own way (which
timeout fired, a server that hung up, a proxy, a bad answer) is listed per
client, in the tables below. Messages name the target as ``host:port``, never
the URL: a password in it is never shown.
"""

from __future__ import annotations

import errno
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import httpx

# httpcore's trace events ("<module>.<step>.started") -> the phase, as a clause for an error message.
_PHASE_OF_STEP = {
    "connect_tcp": "connect",  # DNS lookup and TCP connect
    "start_tls": "tls",
    "send_connection_init": "send",  # HTTP/2's preface and SETTINGS
    "send_request_headers": "send",
    "send_request_body": "send",
    "receive_response_headers": "answer",
    "receive_response_body": "body",
}

_CLAUSES = {
    "pool": "waiting for a free connection to {target}",
    "connect": "connecting to {target}",
    "tls": "in the TLS handshake with {target}",
    "send": "sending {method} to {target}",
    "answer": "waiting for {target} to answer {method}",
    "body": "reading the answer of {target} to {method}",
}


class Phase:
    """The phase a request is in: ``name``, a key of ``_CLAUSES``, set by the client's tracing."""

    __slots__ = ("name",)

    def __init__(self) -> None:
        # Before any event: waiting for the pool to hand out a connection (a reused one sends at once).
        self.name = "pool"

    async def trace(self, event: str, info: dict) -> None:
        _, _, rest = event.partition(".")  # "<http11|http2|connection>.<step>.<started|complete|failed>"
        step, _, state = rest.rpartition(".")
        if state == "started" and step in _PHASE_OF_STEP:
            self.name = _PHASE_OF_STEP[step]

    def clause(self, method: str, target: str) -> str:
        return self.clause_of(self.name, method, target)

    @staticmethod
    def clause_of(name: str, method: str, target: str) -> str:
        return _CLAUSES[name].format(method=method, target=target)


@dataclass(frozen=True)
class Limits:
    """The timeouts of one request, in seconds: ``total`` is the job's; the others are bounded by it."""

    total: float
    connect: float
    read: float

    def as_httpx(self) -> httpx.Timeout:
        # write and pool: the whole budget; the loop cancels the request when the total runs out.
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.total, pool=self.total)

    def as_aiohttp(self) -> aiohttp.ClientTimeout:
        # No total of aiohttp's own: the executor's asyncio.timeout is the job's, for both clients.
        # connect: a connection from aiohttp's pool (at once: the executor's per-host slots are no more
        # than its limit per host), DNS and TCP connect. sock_read: the longest wait for a byte.
        return aiohttp.ClientTimeout(total=None, connect=self.connect, sock_read=self.read)


def limits_for(total_s: float, connect_s: float, read_s: float | None) -> Limits:
    """The job's timeout is the total; connect and read never exceed it. ``read_s`` None: the total."""
    total = max(total_s, 0.001)
    return Limits(total=total, connect=min(connect_s, total), read=total if read_s is None else min(read_s, total))


def target_of(url: str) -> str:
    """host:port of a URL, for error messages (no credentials, path nor query)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port: int | str = parts.port or {"http": 80, "https": 443}.get(parts.scheme) or "?"
    except ValueError:
        return "an invalid URL"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url_problem(url: str) -> str | None:
    """Why ``url`` will not be requested, or None: only http:// and https:// URLs with a host are."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as e:
        return f"bad URL: {e}"
    if parts.scheme not in ("http", "https"):
        shown = f"{parts.scheme}://" if parts.scheme else repr(url)
        return f"only http:// and https:// URLs are requested, not {shown}"
    if not parts.hostname:
        return "the URL has no host"
    return None


def timed_out(limits: Limits, phase: Phase, method: str, target: str) -> str:
    """The job's timeout ran out: the request was cancelled on the loop."""
    return f"timed out after {limits.total:g}s (the job's timeout) {phase.clause(method, target)}"


# Which limit ran out, by the exception that says so; the first match wins. aiohttp's timeouts are
# TimeoutError subclasses, so they come before TimeoutError itself: the job's, from asyncio.timeout.
_LIMIT_OF_TIMEOUT: tuple[tuple[type[BaseException], str], ...] = (
    (httpx.ConnectTimeout, "connect"),
    (aiohttp.ConnectionTimeoutError, "connect"),
    (httpx.ReadTimeout, "read"),
    (aiohttp.ServerTimeoutError, "read"),  # SocketTimeoutError: sock_read
    (httpx.WriteTimeout, "write"),
    (httpx.PoolTimeout, "pool"),
    (TimeoutError, "total"),
)
# A proxy failed (it refused, or answered the tunnel with an error) rather than the target.
_PROXY_FAILED = (httpx.ProxyError, aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError)
# The connection ended before any answer: the server closed it (a kept-alive one it was closing, say).
_HUNG_UP = (aiohttp.ServerDisconnectedError,)
# An answer that is not HTTP, or one cut short.
_BAD_ANSWER = (httpx.RemoteProtocolError, httpx.DecodingError, aiohttp.ClientResponseError, aiohttp.ClientPayloadError)
# A request that cannot be sent as it is (a header value with a newline, say).
_INVALID = (
    httpx.UnsupportedProtocol,
    httpx.InvalidURL,
    aiohttp.InvalidURL,
    aiohttp.NonHttpUrlClientError,
    ValueError,
    TypeError,
)


def explain(exc: BaseException, limits: Limits, phase: Phase, method: str, target: str) -> str:
    """A one-line reason for a request that raised ``exc`` (from either client, or the job's timeout)."""
    for kind, limit in _LIMIT_OF_TIMEOUT:
        if isinstance(exc, kind):
            return _timeout(limit, limits, phase, method, target)
    cause = _root_cause(exc)
    if isinstance(exc, _PROXY_FAILED):
        return f"the proxy for {target} failed: {_reason(cause)}"
    if (problem := _connection_problem(cause, target)) is not None:
        return problem
    if isinstance(exc, _HUNG_UP) or (
        isinstance(exc, httpx.RemoteProtocolError) and "without sending" in str(exc).lower()
    ):
        return f"{target} closed the connection without answering"
    if isinstance(exc, _BAD_ANSWER):
        return f"bad HTTP response from {target}: {_text(exc)}"
    if isinstance(exc, _INVALID):
        return f"invalid request: {_text(exc)}"
    if isinstance(cause, OSError):
        return f"request to {target} failed: {_reason(cause)}"
    return f"request to {target} failed: {type(exc).__name__}: {_text(exc)}"


def _connection_problem(cause: BaseException, target: str) -> str | None:
    """The OS or TLS error under either client's wrapping, or None."""
    if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
        return f"connection refused by {target}"  # one address, or all of them (the same errno)
    if isinstance(cause, socket.gaierror):
        return f"DNS lookup failed for {target}: {cause.strerror or cause}"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed for {target}: {cause.verify_message or cause}"
    if isinstance(cause, ssl.SSLError):
        return f"TLS error with {target}: {getattr(cause, 'reason', None) or cause}"
    if isinstance(cause, ConnectionResetError):
        return f"connection reset by {target}"
    return None


def _timeout(limit: str, limits: Limits, phase: Phase, method: str, target: str) -> str:
    if limit == "total":
        return timed_out(limits, phase, method, target)
    if limit == "connect":
        # It covers the TCP connect and the TLS handshake (and, with aiohttp, its own pool): the phase says which.
        seconds, name, where = (
            limits.connect,
            "connect timeout",
            phase.name if phase.name in ("pool", "tls") else "connect",
        )
    elif limit == "read":
        seconds, name, where = limits.read, "read timeout: no byte came", "body" if phase.name == "body" else "answer"
    elif limit == "write":
        seconds, name, where = limits.total, "write timeout", "send"
    else:
        seconds, name, where = limits.total, "pool timeout", "pool"
    if seconds >= limits.total:
        # A limit as long as the job's timeout (read, by default) runs out with it, whichever fires first.
        name = "the job's timeout"
    return f"timed out after {seconds:g}s ({name}) {Phase.clause_of(where, method, target)}"


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception httpx, httpcore and anyio, or aiohttp, wrapped: the OSError or SSLError.

    They chain it as a cause or, where one is mapped inside an ``except``, as the context.
    """
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        exc = inner
        seen.add(id(exc))
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:  # one address tried
        return _root_cause(exc.exceptions[0])
    return exc


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or _text(exc)


def _text(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientResponseError):
        # Its str() quotes the URL, path and query included; the message alone says what was wrong.
        text = f"HTTP {exc.status} {exc.message}" if isinstance(exc, aiohttp.ClientHttpProxyError) else exc.message
    else:
        text = str(exc)
    return " ".join(text.split()) or type(exc).__name__
