"""The dashboard's web server: aiohttp on an event loop of its own, in a thread beside the node.

``start_dashboard`` binds before it returns (a taken port is a ConfigError
naming the flag) and serves TLS with the API's certificate when the API
serves TLS. With ``serve_metrics`` it also answers ``/metrics`` (when
``--http-listen`` and ``--metrics-listen`` name the same address).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections import OrderedDict
from dataclasses import replace
from importlib import resources

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from shardcron.client.channel import ChannelSecurity
from shardcron.client.client import Client
from shardcron.dashboard import guard, require_extra
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.live import Streams
from shardcron.dashboard.sessions import Sessions
from shardcron.dashboard.views import Pages
from shardcron.errors import ConfigError
from shardcron.runtime.lifeline import UNWATCHED, Lifeline, run_forever

CLIENTS_KEPT = 64  # one API channel per distinct token in use; the least recently used closes


class Dashboard:
    def __init__(
        self,
        *,
        node_id: str,
        api_target: str,
        forward_security: ChannelSecurity | None,
        tokens,
        history: MetricsHistory,
        tls_files: tuple[str, str | None] | None = None,
        serve_metrics: bool = False,
        lifeline: Lifeline = UNWATCHED,
    ):
        require_extra()
        import jinja2  # the dashboard extra's: imported only by a node that serves the dashboard

        self.node_id = node_id
        self.api_target = api_target
        self.forward_security = forward_security or ChannelSecurity()
        self.tokens = tokens  # api.token_source.NodeTokens, or None when the node checks no tokens
        self.history = history
        self.tls_files = tls_files
        self.tls = tls_files is not None
        self.serve_metrics = serve_metrics
        self.lifeline = lifeline  # the dashboard's long-lived thread and tasks report their death through it
        self.sessions = Sessions()
        self.closing = threading.Event()
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("shardcron.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self._clients: OrderedDict[str | None, Client] = OrderedDict()
        self._clients_lock = threading.Lock()
        self.pages = Pages(self)
        self.streams = Streams(self.pages)  # one per dashboard: its cluster streams share one map reader

    @property
    def checks_tokens(self) -> bool:
        return self.tokens is not None

    def identify(self, secret: str):
        return self.tokens.identify(secret) if self.tokens is not None else None

    def client_for(self, secret: str | None) -> Client:
        with self._clients_lock:
            client = self._clients.get(secret)
            if client is None:
                client = self._clients[secret] = Client(
                    self.api_target, timeout_s=30, security=replace(self.forward_security, token=secret)
                )
                while len(self._clients) > CLIENTS_KEPT:
                    self._clients.popitem(last=False)[1].close()
            self._clients.move_to_end(secret)
            return client

    def app(self) -> web.Application:
        app = web.Application(middlewares=[guard.security_headers], client_max_size=guard.MAX_BODY_BYTES)
        app.add_routes(self.pages.routes() + self.streams.routes())
        app.on_cleanup.append(lambda _app: self.streams.map_feed.close())
        app.router.add_static("/static/", str(resources.files("shardcron.dashboard") / "static"))
        if self.serve_metrics:
            app.router.add_get("/metrics", _metrics)
        return app

    def close(self) -> None:
        """Ends the live streams, the API channels and the metrics sampler; a second call does nothing."""
        if self.closing.is_set():
            return
        self.closing.set()
        self.history.stop()
        with self._clients_lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


class DashboardServer:
    """Runs ``dashboard`` on ``listen`` (host:port) until ``stop()``."""

    def __init__(self, dashboard: Dashboard, listen: str):
        self.dashboard = dashboard
        self.listen = listen
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        # Its thread ends on purpose once stop() is called or the start failed, maybe before the node stops.
        self._stopping = threading.Event()
        self._thread = Lifeline(dashboard.lifeline.report, stopping=self._stopping).thread(self._run, "dashboard")

    def start(self) -> DashboardServer:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start() as a ConfigError
            self._error = (
                e
                if isinstance(e, ConfigError)
                else ConfigError(f"--http-listen {self.listen}: cannot serve the dashboard there: {e}")
            )
            self._stopping.set()
            self._ready.set()
            return
        self._ready.set()
        run_forever(self._loop)

    async def _serve(self) -> None:
        host, _, port = self.listen.rpartition(":")
        context = None
        if self.dashboard.tls_files:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.dashboard.tls_files)
        self._runner = web.AppRunner(self.dashboard.app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(
            self._runner, host.strip("[]") or "0.0.0.0", int(port), ssl_context=context, shutdown_timeout=1.0
        ).start()

    def stop(self) -> None:
        self._stopping.set()
        self.dashboard.close()
        if self._runner is None or not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
