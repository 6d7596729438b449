"""The http:// client: one ``aiohttp.ClientSession``, HTTP/1.1 with keep-alive (plain HTTP never speaks h2 here).

Proxies: the standard variables (http_proxy, all_proxy, no_proxy) are read
once, when the session is made, as httpx reads them, rather than with
aiohttp's ``trust_env``: that looks the proxy up and reads ~/.netrc in a
worker thread on every request (two thread hand-offs: 645 µs of client CPU per
request instead of 208 here), and it would send a ~/.netrc password to any
host it names, which httpx never did.
"""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace
from urllib.parse import urlsplit

import aiohttp

from shardcron.executors.http_errors import Limits, Phase
from shardcron.executors.http_request import DEFAULT_HEADERS, Answer, Request, keep_output, split_credentials


class AiohttpClient:
    """Made on the loop (aiohttp binds the session to it), used there only."""

    def __init__(self, *, max_connections: int, max_per_host: int, keepalive_s: float) -> None:
        self._proxies = urllib.request.getproxies_environment()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=max_connections, limit_per_host=max_per_host, keepalive_timeout=keepalive_s
            ),
            cookie_jar=aiohttp.DummyCookieJar(),  # keeps nothing: the session is shared by every job of the node
            trust_env=False,
            headers=DEFAULT_HEADERS,
            # aiohttp would label even an empty POST application/octet-stream; http_request sets the
            # Content-Type of a body itself, and a request without one goes without, as with httpx.
            skip_auto_headers=("Content-Type",),
            trace_configs=[phase_tracing()],
        )

    async def exchange(self, request: Request, limits: Limits, phase: Phase) -> Answer:
        proxy, headers = self._proxy_for(request)
        async with self._session.request(
            request.method,
            request.url,
            headers=headers,
            data=request.body,
            allow_redirects=False,
            timeout=limits.as_aiohttp(),
            proxy=proxy,
            trace_request_ctx=phase,
        ) as response:
            return Answer(response.status, response.reason or "", await keep_output(response.content.iter_any()))

    async def aclose(self) -> None:
        await self._session.close()

    def _proxy_for(self, request: Request) -> tuple[str | None, dict[str, str]]:
        """The proxy to send ``request`` through (None: straight to its host), and its headers for it."""
        if not self._proxies:
            return None, request.headers
        proxy = self._proxies.get("http") or self._proxies.get("all")
        host = urlsplit(request.url).hostname or ""
        # typeshed omits proxy_bypass_environment, which urllib.request has defined since Python 3.3.
        if proxy is None or urllib.request.proxy_bypass_environment(host, self._proxies):  # type: ignore[attr-defined]
            return None, request.headers
        # A plain-HTTP request goes to the proxy whole: its credentials travel in the request's own headers.
        proxy, authorization = split_credentials(proxy)
        if authorization is None:
            return proxy, request.headers
        return proxy, {**request.headers, "Proxy-Authorization": authorization}


def phase_tracing() -> aiohttp.TraceConfig:
    """Keeps ``Phase.name`` (the ``trace_request_ctx`` of each request) up to date from aiohttp's signals."""
    tracing = aiohttp.TraceConfig()
    tracing.on_connection_queued_start.append(_entering("pool"))
    tracing.on_connection_create_start.append(_entering("connect"))  # DNS lookup and TCP connect
    tracing.on_connection_create_end.append(_entering("send"))
    tracing.on_connection_reuseconn.append(_entering("send"))
    tracing.on_request_headers_sent.append(_headers_sent)
    # The body goes in one chunk, signalled as it is handed to the socket: what follows is the wait.
    tracing.on_request_chunk_sent.append(_entering("answer"))
    tracing.on_request_end.append(_entering("body"))  # the answer's head has come
    return tracing


def _entering(name: str):
    async def enter(session: aiohttp.ClientSession, context: SimpleNamespace, params: object) -> None:
        context.trace_request_ctx.name = name

    return enter


async def _headers_sent(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestHeadersSentParams
) -> None:
    # Without a body the request is out with its head; with one, its chunk follows.
    has_body = params.headers.get("Content-Length", "0") != "0" or "Transfer-Encoding" in params.headers
    context.trace_request_ctx.name = "send" if has_body else "answer"
