"""Sends the Redis kinds' per-slot commands in batches: one pipelined round trip per burst, on the node's loop.

A ``RedisBatcher`` belongs to one redis.asyncio client (one URL and socket
timeout). ``send(*command)`` queues one slot's command (an EVAL of a guard
script, see ``redis_stream`` and ``arq``) and returns a future for that
command's own reply. The first command of a loop turn schedules a flush with
``call_soon``, so every tick that reaches the batcher in the same turn (a
burst of one shard's slots) rides in the same pipeline; ``MAX_BATCH``
commands flush at once. A flush is a task of its own, not the ticks': a tick
cancelled while it waits drops its future and leaves the others' batch alone
(its command may still have run; the slot's marker makes a retry a
duplicate).

Per-slot outcomes: the pipeline runs without MULTI and with
``raise_on_error=False``, so one slot's error reply fails that slot's future
only. A broken connection fails every future of its batch (redis-py retries a
refused or broken connection once on a fresh one first: each command is
guarded by its slot's marker, so sending the batch again never enqueues
twice).

``flushes`` and ``commands_sent`` count round trips and commands, for tests.
"""

from __future__ import annotations

import asyncio
from typing import Any

# A burst larger than this goes out in several round trips: a pipeline's replies are held in memory.
MAX_BATCH = 512


class RedisBatcher:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.flushes = 0
        self.commands_sent = 0
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future]] = []
        self._flush_scheduled = False
        self._sending: set[asyncio.Task] = set()

    def send(self, *command: Any) -> asyncio.Future:
        """On the loop: queue ``command``; the future gets its reply, or the error for it alone."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((command, future))
        if len(self._pending) >= MAX_BATCH:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    async def aclose(self) -> None:
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        await self.client.aclose()

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._pending = self._pending, []
        batch = [(command, future) for command, future in batch if not future.done()]  # cancelled ticks
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future]]) -> None:
        self.flushes += 1
        self.commands_sent += len(batch)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for command, _ in batch:
                    pipe.execute_command(*command)
                replies = await pipe.execute(raise_on_error=False)
        except BaseException as e:  # noqa: BLE001 - the whole round trip failed: every slot of it hears why
            for _, future in batch:
                if not future.done():
                    future.set_exception(e if isinstance(e, Exception) else ConnectionError(repr(e)))
            if not isinstance(e, Exception):
                raise
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
