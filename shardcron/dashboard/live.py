"""Server-sent event streams: the shard map as it changes, and a job's ticks as they are recorded.

The browser never polls: it holds one EventSource per page. The shard map is
read every ``MAP_EVERY_S`` by one reader that all of this dashboard's cluster
streams follow (``map_feed.py`` says why that shows no visitor more than the
API would), and sent only when its rendering changed; a job's ticks come from
the API's ``WatchTicks`` stream, as the visitor, read in a thread, one event
per tick. A comment line every ``KEEPALIVE_S`` keeps proxies from closing a
quiet stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

from aiohttp import web

from shardcron.dashboard import present
from shardcron.dashboard.guard import Visitor
from shardcron.dashboard.map_feed import ShardMapFeed
from shardcron.errors import ShardcronError

MAP_EVERY_S = 0.5
KEEPALIVE_S = 15.0
# Event streams one dashboard holds open at once; beyond them, 503 (each job stream is a WatchTicks
# stream and a thread, which the API's --max-streams bounds too).
MAX_STREAMS = 200


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
        self.map_feed = ShardMapFeed(pages.coloured_shard_map, self._render_map,
                                     lambda v: pages.still_known(v.session.secret), MAP_EVERY_S)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/events/cluster", self._counted(self.cluster)),
                web.get("/events/job", self._counted(self.job))]

    def _counted(self, handler):
        """``handler(request, visitor)``, for a signed-in visitor, while fewer than MAX_STREAMS are open."""
        async def serve(request: web.Request) -> web.StreamResponse:
            v = self.pages.signed_in(request)  # an anonymous visitor is refused before anything is held
            if self._open >= MAX_STREAMS:
                raise web.HTTPServiceUnavailable(
                    text=f"this node's dashboard holds {MAX_STREAMS} live streams already; close a tab or try "
                         "another node")
            self._open += 1  # one event loop: no lock needed
            try:
                return await handler(request, v)
            finally:
                self._open -= 1
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
        job_id, namespace = request.query.get("id", ""), request.query.get("namespace", "default")
        loop = asyncio.get_running_loop()
        ticks: asyncio.Queue = asyncio.Queue(maxsize=1000)
        watch = self.d.client_for(v.session.secret).watch_ticks(job_id, namespace=namespace)

        def offer(item) -> None:
            if not ticks.full():  # a browser too slow for its job's ticks misses some; the table has them all
                ticks.put_nowait(item)

        def follow() -> None:
            try:
                for tick in watch:
                    loop.call_soon_threadsafe(offer, present.tick_point(tick))
            except ShardcronError as e:
                loop.call_soon_threadsafe(offer, {"watch_error": str(e)})

        threading.Thread(target=follow, name="dashboard-watch", daemon=True).start()
        stream = await _open_stream(request)
        try:
            await stream.write(b": watching\n\n")
            while not self.d.closing.is_set():
                try:
                    point = await asyncio.wait_for(ticks.get(), KEEPALIVE_S)
                except TimeoutError:
                    await stream.write(b": still here\n\n")
                    continue
                await stream.write(sse_event("watch-error" if "watch_error" in point else "tick", json.dumps(point)))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watch.cancel()
        return stream
