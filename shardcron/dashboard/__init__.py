"""The web dashboard every node can serve (``--http-listen``): cluster, jobs, a job, health.

It calls the node's own API in this process (``api.in_process``), as the
visitor's token, so it shows exactly what the API would show that token,
through any node, and refuses what the API refuses (a ``read`` token's pause is PERMISSION_DENIED,
shown as a message). Pages are rendered on the server (Jinja2) and made live
with htmx and server-sent events; charts are uPlot. Every asset ships in the
wheel (``static/vendor``, see its README): no CDN, and a strict
Content-Security-Policy (no inline script or style at all).

    sessions.py  logged-in visitors: an opaque cookie, the token kept server-side, CSRF
    guard.py     who is asking (cookie or bearer header), CSRF and the security headers
    history.py   the node's own metrics sampled over time (pure maths + a sampler task)
    views.py     the pages and the actions
    live.py      the server-sent event streams (shard map, a job's ticks)
    map_feed.py  one reader of the shard map per dashboard, shared by the cluster pages' streams
    server.py    aiohttp on the node's one event loop, beside the API and the ticks
"""

import importlib

from shardcron.errors import ConfigError


def require_extra() -> None:
    """The dashboard's templates need Jinja2, from the ``dashboard`` extra: say so, not a traceback."""
    try:
        importlib.import_module("jinja2")
    except ImportError:
        raise ConfigError(
            "--http-listen: the dashboard needs the 'dashboard' extra: pip install 'shardcron[dashboard]'"
        ) from None
