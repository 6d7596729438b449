"""A dashboard's API over a node's gRPC address, for a dashboard in the test's process beside a node in
another (a node's own dashboard calls its API in its process: ``api.in_process``)."""

from __future__ import annotations

import asyncio
import functools

from shardcron import Client
from shardcron.client.channel import ChannelSecurity


class RemoteApi:
    """``as_caller(secret).call(method, ...)``: ``Client.<method>(...)`` with ``secret``, awaited (on a worker
    thread)."""

    pool = None  # the dashboard's blocking work runs on the loop's default executor

    def __init__(self, target: str):
        self.target = target
        self._clients: dict[str | None, Client] = {}

    def as_caller(self, secret: str | None) -> _Caller:
        client = self._clients.get(secret)
        if client is None:
            client = self._clients[secret] = Client(self.target, security=ChannelSecurity(token=secret))
        return _Caller(client)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


class _Caller:
    def __init__(self, client: Client):
        self._client = client

    async def call(self, method: str, *args, **kwargs):
        return await asyncio.to_thread(functools.partial(getattr(self._client, method), *args, **kwargs))
