"""One reader of the shard map per dashboard, shared by every open cluster page's event stream.

Each cluster page holds an event stream (``live.py``). Rather than each reading
GetShards for itself every ``every_s``, the streams follow one reader, which
runs only while at least one stream follows it and renders each new map once.

Sharing the reading shares no more than the API would show: GetShards answers
every token it admits with the same map (``rules/scopes.py``: role read in any
namespace; nodes, leaders and job counts, no tenant's data). Whether a visitor
may see it stays the API's decision, made for each visitor:

- a stream's first readings are its own, made with its visitor's token, until
  one shows the map (the API admitted the token) or is refused (then that
  refusal is the stream's last rendering);
- the shared reading is made with the token of a follower the node still
  knows; a refusal of it is shown to nobody;
- before each rendering it hands on, a follower's token must still be known to
  the node: a revoked token's stream ends, with a rendering that says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from shardcron.client.errors import ApiError
from shardcron.dashboard.guard import Visitor
from shardcron.errors import ShardcronError
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

log = logging.getLogger(__name__)

# What the API answers a token it will not show the map to: never shared, and the end of that visitor's stream.
REFUSALS = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
REVOKED = "This page's token has been revoked: the cluster is no longer shown here. Reload the page to log in again."


class Refused(Exception):
    """The API refused a visitor the map; ``html`` renders its reason."""

    def __init__(self, html: str):
        super().__init__(html)
        self.html = html


@dataclass(eq=False)
class _Follower:
    visitor: Visitor
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class ShardMapFeed:
    """``renderings(visitor)`` for each cluster stream, over one reader of ``read`` every ``every_s``.

    ``read(visitor)``: GetShards as the visitor (ShardcronError when it fails);
    ``render(map, error)``: the HTML a stream sends; ``known(visitor)``: whether
    the node still knows the visitor's token. All of it runs on the dashboard's
    event loop, so nothing here needs a lock.
    """

    def __init__(
        self,
        read: Callable[[Visitor], Awaitable[dict]],
        render: Callable[[dict | None, str | None], str],
        known: Callable[[Visitor], bool],
        every_s: float,
        lifeline: Lifeline = UNWATCHED,
    ):
        self._read = read
        self._lifeline = lifeline
        self._render = render
        self._known = known
        self._every_s = every_s
        self._followers: list[_Follower] = []
        self._latest: str | None = None
        self._reader: asyncio.Task | None = None

    @property
    def followers(self) -> int:
        return len(self._followers)

    @property
    def reading(self) -> bool:
        """Whether the shared reader runs (it does while anyone follows, and a little after)."""
        return self._reader is not None

    async def renderings(self, v: Visitor) -> AsyncGenerator[str | None, None]:
        """What ``v``'s page shows, every ``every_s`` or sooner (None: nothing new), until ``v`` may see no more.

        Use it under ``contextlib.aclosing``, so that a stream that ends stops following at once.
        """
        while True:
            try:
                html, shows_map = await self._reading(v)
            except Refused as refused:
                yield refused.html
                return
            yield html
            if shows_map:  # the API has admitted v: from now on the shared reading serves it
                break
            await asyncio.sleep(self._every_s)
        follower = _Follower(v)
        self._followers.append(follower)
        if self._reader is None:
            # It ends on its own once nobody follows.
            self._reader = self._lifeline.task(
                asyncio.get_running_loop(), self._run(), "dashboard-shard-map", may_end=True
            )
        try:
            while True:
                changed = await _woken(follower.changed, self._every_s)
                if not self._known(v):
                    yield self._render(None, REVOKED)
                    return
                # Only a change since it joined: the reading before it may be older than its own first.
                yield self._latest if changed else None
        finally:
            self._followers.remove(follower)

    async def close(self) -> None:
        """Stop the reader now (the dashboard's server is shutting down)."""
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _reading(self, v: Visitor) -> tuple[str, bool]:
        """The rendering of a reading as ``v``, and whether it shows the map (not a failure of the
        cluster's, which any token would get too); Refused when the API refuses ``v``."""
        try:
            return self._render(await self._read(v), None), True
        except ApiError as e:
            if e.code in REFUSALS:
                raise Refused(self._render(None, str(e))) from None
            return self._render(None, str(e)), False
        except ShardcronError as e:
            return self._render(None, str(e)), False

    async def _run(self) -> None:
        try:
            while self._followers:
                reader = next((f.visitor for f in self._followers if self._known(f.visitor)), None)
                if reader is not None:
                    await self._share(reader)
                await asyncio.sleep(self._every_s)
        finally:
            self._reader = None  # no await since the last follower left: one who joins now starts a new reader

    async def _share(self, reader: Visitor) -> None:
        try:
            html, _ = await self._reading(reader)
        except Refused:
            return  # that follower's own check ends its stream; the others wait for the next reading
        except Exception:  # noqa: BLE001 - the pages keep their last map; the next reading may do better
            log.warning("dashboard: reading the shard map failed", exc_info=True)
            return
        if html != self._latest:
            self._latest = html
            for f in self._followers:
                f.changed.set()


async def _woken(event: asyncio.Event, timeout_s: float) -> bool:
    """Whether ``event`` was set within ``timeout_s`` (and clear it for the next wait)."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        return False
    event.clear()
    return True
