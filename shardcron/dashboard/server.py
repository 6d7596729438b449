"""The dashboard's web server: aiohttp on the node's one event loop (``runtime.node_loop``), beside the API.

``DashboardServer.start`` binds before it returns (a taken port is a
ConfigError naming the flag) and serves TLS with the API's certificate when
the API serves TLS. With ``serve_metrics`` it also answers ``/metrics`` (when
``--http-listen`` and ``--metrics-listen`` name the same address). The pages
call the node's API in this process (``api.in_process``), as the visitor,
whose store work runs on the API's pool; the registry is walked on that pool
too: nothing here blocks the loop the ticks run on.
A server made without the node's loop (a test) starts a loop of its own
("dashboard") and closes it when it stops.
"""

from __future__ import annotations

import logging
import ssl
import threading
from concurrent.futures import Executor
from importlib import resources

from aiohttp import web

from shardcron.api.in_process import InProcessApi
from shardcron.dashboard import guard, require_extra
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.live import Streams
from shardcron.dashboard.sessions import Sessions
from shardcron.dashboard.views import Pages
from shardcron.errors import ConfigError
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.metrics_http import metrics_response
from shardcron.runtime.node_loop import NodeLoop

log = logging.getLogger(__name__)

START_WITHIN_S = 30.0  # binding the port and starting the app on the loop: far longer than it takes
STOP_WITHIN_S = 10.0  # the streams get aiohttp's shutdown_timeout (1 s); this bounds what the node waits


class Dashboard:
    """``api``: the node's API in this process (``ApiServer.in_process``), which the pages and streams call as
    the visitor (None: no API, for tests of the templates and the server's life)."""

    def __init__(
        self,
        *,
        node_id: str,
        api: InProcessApi | None,
        tokens,
        history: MetricsHistory,
        tls_files: tuple[str, str | None] | None = None,
        serve_metrics: bool = False,
        sampler_pool: Executor | None = None,
        lifeline: Lifeline = UNWATCHED,
    ):
        require_extra()
        import jinja2  # the dashboard extra's: imported only by a node that serves the dashboard

        self.node_id = node_id
        self.api = api
        self.tokens = tokens  # api.token_source.NodeTokens, or None when the node checks no tokens
        self.history = history
        self.tls_files = tls_files
        self.tls = tls_files is not None
        self.serve_metrics = serve_metrics
        self._sampler_pool = sampler_pool
        self.lifeline = lifeline  # the dashboard's long-lived tasks report their death through it
        self.sessions = Sessions()
        self.closing = threading.Event()
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("shardcron.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.pages = Pages(self)
        self.streams = Streams(self.pages)  # one per dashboard: its cluster streams share one map reader

    @property
    def checks_tokens(self) -> bool:
        return self.tokens is not None

    def identify(self, secret: str):
        return self.tokens.identify(secret) if self.tokens is not None else None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[guard.security_headers], client_max_size=guard.MAX_BODY_BYTES)
        app.add_routes(self.pages.routes() + self.streams.routes())
        app.on_cleanup.append(lambda _app: self.streams.map_feed.close())
        app.router.add_static("/static/", str(resources.files("shardcron.dashboard") / "static"))
        if self.serve_metrics:
            app.router.add_get("/metrics", self._metrics)
        return app

    @property
    def pool(self) -> Executor | None:
        """Where the blocking work of the pages runs: the API's pool (None, without an API: the loop's own)."""
        return self.api.pool if self.api is not None else None

    @property
    def sampler_pool(self) -> Executor | None:
        """Where the metrics sampler reads the registry: the one given (a node's turn-taking lane over the API's
        pool, ``runtime.one_at_a_time``), else ``pool``."""
        return self._sampler_pool if self._sampler_pool is not None else self.pool

    async def _metrics(self, request: web.Request) -> web.Response:
        return await metrics_response(self.pool)

    def close(self) -> None:
        """Ends the live streams (the server stops the sampler, on its loop); a second call does nothing."""
        self.closing.set()


class DashboardServer:
    """Runs ``dashboard`` on ``listen`` (host:port) until ``stop()``, on ``loop`` (the node's; None: a loop of
    its own)."""

    def __init__(self, dashboard: Dashboard, listen: str, loop: NodeLoop | None = None):
        self.dashboard = dashboard
        self.listen = listen
        self._runner: web.AppRunner | None = None
        # A loop of its own ends on purpose once stop() is called or the start failed, maybe before the node stops.
        self._stopping = threading.Event()
        self._owns_loop = loop is None
        self.loop = (
            NodeLoop("dashboard", Lifeline(dashboard.lifeline.report, stopping=self._stopping))
            if loop is None
            else loop
        )

    def start(self) -> DashboardServer:
        try:
            self.loop.run(self._serve(), START_WITHIN_S)
        except BaseException as e:
            self._stopping.set()
            if self._owns_loop:
                self.loop.close()
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"--http-listen {self.listen}: cannot serve the dashboard there: {e}") from e
        return self

    async def _serve(self) -> None:
        host, _, port = self.listen.rpartition(":")
        context = None
        if self.dashboard.tls_files:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.dashboard.tls_files)
        runner = web.AppRunner(self.dashboard.app(), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port), ssl_context=context).start()
        except BaseException:
            await runner.cleanup()  # on a loop that goes on: nothing of the failed start is left on it
            raise
        self._runner = runner
        self.dashboard.history.start(self.dashboard.sampler_pool)

    def stop(self) -> None:
        """Ends the streams, the sampler and the server; never waits longer than ``STOP_WITHIN_S``."""
        self._stopping.set()
        self.dashboard.close()
        runner, self._runner = self._runner, None  # a second stop finds nothing left to shut down
        try:
            if runner is not None and self.loop.running:
                self.loop.run(self._shut_down(runner), STOP_WITHIN_S)
        except Exception:  # noqa: BLE001 - stopping goes on; what is left ends with the loop
            log.warning("the dashboard did not stop cleanly", exc_info=True)
        if self._owns_loop:
            self.loop.close()

    async def _shut_down(self, runner: web.AppRunner) -> None:
        await self.dashboard.history.stop()
        await runner.cleanup()
