"""Server-sent event streams: the shard map as it changes, and a job's ticks as they are recorded.

The browser never polls: it holds one EventSource per page. The shard map is
read every ``MAP_EVERY_S`` by one reader that all of this dashboard's cluster
streams follow (``map_feed.py`` says why that shows no visitor more than the
API would), and sent only when its rendering changed; a job's ticks come from
the API's ``WatchTicks`` stream, as the visitor, in this process (``api.in_process``),
one event per tick. A comment line every ``KEEPALIVE_S`` keeps proxies from closing a
quiet stream.

A stream holds one of the dashboard's ``MAX_STREAMS`` slots, and one of its
visitor's ``MAX_STREAMS_PER_VISITOR`` (a visitor: a token, whichever sessions
and scripts use it; without tokens, a session, or a script's address). A job
stream the visitor's token may not watch is refused (403) before it is opened,
and one the API ends (its error is sent as ``watch-error``) is closed at once,
so no refused stream holds a slot. A revoked token's streams end at once: the
job stream is told by the node's tokens (``NodeTokens.when_revoked``), the
cluster stream by its feed (``map_feed.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from aiohttp import web

from shardcron.dashboard import guard, present
from shardcron.dashboard.guard import Visitor
from shardcron.dashboard.map_feed import ShardMapFeed
from shardcron.errors import InvalidJob, ShardcronError
from shardcron.rules.scopes import authorize
from shardcron.spec.namespaces import namespace_or_default

MAP_EVERY_S = 0.5
KEEPALIVE_S = 15.0
# Event streams one dashboard holds open at once; beyond them, 503 (each job stream is a WatchTicks
# stream, which the API's --max-streams bounds too).
MAX_STREAMS = 200
# ... and one visitor at once: a few tabs' worth, so that one visitor cannot hold the node's slots.
MAX_STREAMS_PER_VISITOR = 20
REVOKED = "token revoked: this page's ticks are no longer shown. Reload the page to log in again."
TICKS_QUEUED = 1000  # a browser too slow for its job's ticks misses some; the table has them all


def visitor_key(v: Visitor, remote: str | None) -> str:
    """Whose streams these are: the token's name; without tokens, the session, or a script's address."""
    if v.session.token is not None:
        return "token:" + v.session.token.name
    return "session:" + v.session.id if v.session.id else "address:" + (remote or "unknown")


def watch_refusal(v: Visitor, namespace: str) -> str | None:
    """Why ``v`` may not watch a job of ``namespace`` (the API's own rule, ``scopes.authorize``), or None.
    Without tokens, or for a namespace the API would refuse by name, the API answers."""
    if v.session.token is None:
        return None
    try:
        namespace = namespace_or_default(namespace)
    except InvalidJob as e:
        return str(e)
    denied = authorize(v.session.token, "WatchTicks", namespace)
    return denied.reason if denied is not None else None


def sse_event(name: str, data: str) -> bytes:
    lines = data.splitlines() or [""]
    return (f"event: {name}\n" + "".join(f"data: {line}\n" for line in lines) + "\n").encode()


async def _open_stream(request: web.Request) -> web.StreamResponse:
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
    await stream.prepare(request)
    return stream


class Streams:
    def __init__(self, pages):
        self.pages = pages
        self.d = pages.d
        self._open = 0
        self._by_visitor: dict[str, int] = {}
        self.map_feed = ShardMapFeed(
            pages.coloured_shard_map,
            self._render_map,
            lambda v: pages.still_known(v.session.secret),
            MAP_EVERY_S,
            lifeline=pages.d.lifeline,
        )

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/events/cluster", self._counted(self.cluster)),
            web.get("/events/job", self._counted(self.job)),
        ]

    def _counted(self, handler):
        """``handler(request, visitor)``, for a signed-in visitor, while fewer than MAX_STREAMS are open
        and fewer than MAX_STREAMS_PER_VISITOR of the visitor's."""

        async def serve(request: web.Request) -> web.StreamResponse:
            v = self.pages.signed_in(request)  # an anonymous visitor is refused before anything is held
            key = visitor_key(v, request.remote)
            held = self._by_visitor.get(key, 0)
            if held >= MAX_STREAMS_PER_VISITOR:
                raise web.HTTPTooManyRequests(
                    text=f"this visitor already holds {held} live streams on this node's dashboard, the most one "
                    f"may ({MAX_STREAMS_PER_VISITOR}); close a tab first"
                )
            if self._open >= MAX_STREAMS:
                raise web.HTTPServiceUnavailable(
                    text=f"this node's dashboard holds {MAX_STREAMS} live streams already; close a tab or try "
                    "another node"
                )
            self._open += 1  # one event loop: no lock needed
            self._by_visitor[key] = held + 1
            try:
                return await handler(request, v)
            finally:
                self._open -= 1
                left = self._by_visitor[key] - 1
                if left:
                    self._by_visitor[key] = left
                else:
                    del self._by_visitor[key]

        return serve

    async def cluster(self, request: web.Request, v: Visitor) -> web.StreamResponse:
        stream = await _open_stream(request)
        sent, quiet_since = None, time.monotonic()
        try:
            async with contextlib.aclosing(self.map_feed.renderings(v)) as renderings:
                async for html in renderings:
                    if self.d.closing.is_set():
                        break
                    if html is not None and html != sent:
                        await stream.write(sse_event("cluster", html))
                        sent, quiet_since = html, time.monotonic()
                    elif time.monotonic() - quiet_since > KEEPALIVE_S:
                        await stream.write(b": still here\n\n")
                        quiet_since = time.monotonic()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return stream

    def _render_map(self, shard_map: dict | None, error: str | None) -> str:
        return self.d.templates.get_template("_cluster.html").render(map=shard_map, error=error, present=present)

    async def job(self, request: web.Request, v: Visitor) -> web.StreamResponse:
        try:
            job_id, namespace = guard.field(request.query, "id"), guard.field(request.query, "namespace", "default")
        except guard.FieldTooLong as e:
            raise web.HTTPBadRequest(text=str(e)) from None
        refusal = watch_refusal(v, namespace)
        if refusal is not None:  # an EventSource answered 403 gives up: it does not retry
            raise web.HTTPForbidden(text=refusal)
        loop = asyncio.get_running_loop()
        ticks: asyncio.Queue = asyncio.Queue(maxsize=TICKS_QUEUED)

        def offer(item) -> None:
            if not ticks.full():
                ticks.put_nowait(item)

        def revoked() -> None:  # on the loop: what is queued is not shown any more
            while not ticks.empty():
                ticks.get_nowait()
            ticks.put_nowait({"watch_error": REVOKED})

        token = v.session.token
        unsubscribe = (
            self.d.tokens.when_revoked(token.secret_hash, loop, revoked)
            if token is not None and self.d.tokens is not None
            else (lambda: None)
        )

        async def follow() -> None:  # a task of its own: the visitor is the caller in its context only
            try:
                async for tick in self.d.api.watch_ticks(v.session.secret, job_id, namespace):
                    offer(present.tick_point(tick))
            except ShardcronError as e:
                offer({"watch_error": str(e)})

        watch = asyncio.ensure_future(follow())
        stream = await _open_stream(request)
        try:
            await stream.write(b": watching\n\n")
            while not self.d.closing.is_set():
                try:
                    point = await asyncio.wait_for(ticks.get(), KEEPALIVE_S)
                except TimeoutError:
                    await stream.write(b": still here\n\n")
                    continue
                if "watch_error" in point:  # refused, or revoked: the page says why, and the stream ends
                    await stream.write(sse_event("watch-error", json.dumps(point)))
                    break
                await stream.write(sse_event("tick", json.dumps(point)))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unsubscribe()
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)  # its stream's slot is given back now
        return stream
