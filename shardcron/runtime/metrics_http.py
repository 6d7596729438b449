"""``--metrics-listen``: Prometheus' ``/metrics``, served by aiohttp on the node's loop, with no thread of its own.

The registry is walked on a pool, off the loop: the gauges' callbacks take the
node's locks. A wedged loop cannot answer a scrape: Prometheus then marks the
target down (``up == 0``), and ``--health-listen``, which has threads of its
own, answers ``NOT_SERVING`` (``api/health_port.py``). The dashboard serves
the same answer when ``--http-listen`` names the same address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from shardcron.errors import ConfigError
from shardcron.runtime.node_loop import NodeLoop

START_WITHIN_S = 30.0  # binding the port on the loop: far longer than it takes
STOP_WITHIN_S = 5.0


async def metrics_response(pool: Executor | None) -> web.Response:
    """The registry in Prometheus' text format, walked on ``pool`` (None: the loop's default executor)."""
    body = await asyncio.get_running_loop().run_in_executor(pool, generate_latest, REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


class MetricsServer:
    """``/metrics`` on ``listen`` (host:port) until ``stop()``, on ``loop``; each scrape walks the registry on
    the pool ``pool()`` names at that moment (the API's, once it runs)."""

    def __init__(self, listen: str, loop: NodeLoop, pool: Callable[[], Executor | None]) -> None:
        self.listen = listen
        self._loop = loop
        self._pool = pool
        self._runner: web.AppRunner | None = None

    def start(self) -> MetricsServer:
        try:
            self._loop.run(self._serve(), START_WITHIN_S)
        except (OSError, ValueError, TimeoutError, RuntimeError) as e:
            raise ConfigError(f"--metrics-listen {self.listen}: cannot serve metrics there: {e}") from None
        return self

    async def _serve(self) -> None:
        host, _, port = self.listen.rpartition(":")
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port)).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def _metrics(self, request: web.Request) -> web.Response:
        return await metrics_response(self._pool())

    def stop(self) -> None:
        """Close the port; a second call does nothing, nor a call once the loop has stopped."""
        runner, self._runner = self._runner, None
        if runner is None or not self._loop.running:
            return
        try:
            self._loop.run(runner.cleanup(), STOP_WITHIN_S)
        except (RuntimeError, TimeoutError):  # the loop is going: the port closes with it
            pass


__all__ = ["MetricsServer", "metrics_response"]
