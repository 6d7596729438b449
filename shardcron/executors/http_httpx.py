"""The https:// client: one ``httpx.AsyncClient``, for HTTP/2 where a TLS server offers it by ALPN.

Every tick to an HTTP/2 origin is a stream on one connection. It trusts the
system's store (``ssl.create_default_context()``, which reads SSL_CERT_FILE
and SSL_CERT_DIR), as urllib did, not certifi's bundle. Proxies come from the
environment when the client is made (httpx's ``trust_env``).
"""

from __future__ import annotations

import http.cookiejar
import ssl

import httpx

from shardcron.executors.http_errors import Limits, Phase
from shardcron.executors.http_request import DEFAULT_HEADERS, Answer, Request, keep_output


class HttpxClient:
    """Made on the loop, used there only. ``max_keepalive``: idle connections kept, across hosts."""

    def __init__(self, *, max_connections: int, max_keepalive: int, keepalive_s: float) -> None:
        self._client = httpx.AsyncClient(
            http2=True,
            verify=ssl.create_default_context(),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_keepalive, keepalive_expiry=keepalive_s
            ),
            follow_redirects=False,
            trust_env=True,
            # A jar that refuses every cookie: the client is shared by every job of the node.
            cookies=http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
            headers=DEFAULT_HEADERS,
        )

    async def exchange(self, request: Request, limits: Limits, phase: Phase) -> Answer:
        # UTF-8 bytes: httpx would encode a str value as ASCII and refuse a job id in Japanese, say.
        # (Names are ASCII tokens, as httpx would encode them itself.)
        headers = {name.encode("ascii"): value.encode("utf-8") for name, value in request.headers.items()}
        sent = self._client.build_request(
            request.method,
            request.url,
            headers=headers,
            content=request.body,
            timeout=limits.as_httpx(),
            extensions={"trace": phase.trace},
        )
        response = await self._client.send(sent, stream=True)
        try:
            return Answer(response.status_code, response.reason_phrase, await keep_output(response.aiter_bytes()))
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()
