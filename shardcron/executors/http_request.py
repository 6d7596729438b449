"""What an HTTP tick sends and what it keeps, the same whichever client (``http_aiohttp``, ``http_httpx``) sends it.

``prepare`` turns a job's ``HttpSpec`` and the tick into a ``Request``: the
job's headers minus the ones shardcron reserves, plus the tick's; a
Content-Type for a body; and a user and password in the URL taken out of it
and sent as Basic authentication, so that neither client ever holds the URL
with its password (nor quotes it in an exception). ``keep_output`` reads at
most ``OUTPUT_LIMIT_BYTES`` of an answer.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

from shardcron.executors.identity import with_tick_headers
from shardcron.model import OUTPUT_LIMIT_BYTES, HttpSpec, TickContext

# Both clients send these unless the job sets its own. identity, as urllib sent: no compression
# to undo on either side for an output of at most 64 KiB.
DEFAULT_HEADERS = {"User-Agent": f"shardcron/{version('shardcron')}", "Accept-Encoding": "identity"}


@dataclass(frozen=True)
class Request:
    method: str
    url: str  # without its userinfo
    headers: dict[str, str]
    body: bytes | None


class Answer(NamedTuple):
    status: int
    reason: str
    output: bytes  # at most OUTPUT_LIMIT_BYTES of the body


def prepare(spec: HttpSpec, ctx: TickContext) -> Request:
    url, authorization = split_credentials(spec.url)
    headers = request_headers(spec, ctx)
    if authorization is not None:
        # The URL's credentials win over a job's own Authorization header, as httpx had them.
        headers = {name: value for name, value in headers.items() if name.lower() != "authorization"}
        headers["Authorization"] = authorization
    return Request(spec.method, url, headers, spec.body.encode("utf-8") if spec.body else None)


def request_headers(spec: HttpSpec, ctx: TickContext) -> dict[str, str]:
    """User headers, minus any that would shadow shardcron's, plus shardcron's."""
    headers = with_tick_headers(spec.headers, ctx)
    if spec.body and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "text/plain; charset=utf-8"
    return headers


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the Basic ``Authorization`` value it held (None: it held none).

    The user and password are percent-decoded, then sent as UTF-8, as httpx sent them.
    """
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


async def keep_output(chunks: AsyncIterator[bytes]) -> bytes:
    """At most OUTPUT_LIMIT_BYTES of a body. Only what will be kept is read: the caller's closing the
    response then drops the rest (and that connection, rather than reading a large body to reuse it)."""
    kept = bytearray()
    async for chunk in chunks:
        kept += chunk
        if len(kept) >= OUTPUT_LIMIT_BYTES:
            break
    return bytes(kept[:OUTPUT_LIMIT_BYTES])
