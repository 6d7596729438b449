"""Sends the Redis kinds' per-slot commands in batches: one pipelined round trip per burst, on the node's loop.

A ``RedisBatcher`` belongs to one redis.asyncio client (one URL and socket
timeout). ``send(*command)`` queues one slot's command (an EVAL of a guard
script, see ``redis_stream`` and ``arq``) for this loop turn's batch
(``turn_batch``) and returns a future for that command's own reply. A tick
cancelled while it waits leaves its command to the batch, which may still run
it: the slot's marker makes a retry a duplicate.

Per-slot outcomes: the pipeline runs without MULTI and with
``raise_on_error=False``, so one slot's error reply fails that slot's future
only. A broken connection fails every future of its batch (redis-py retries a
refused or broken connection once on a fresh one first: each command is
guarded by its slot's marker, so sending the batch again never enqueues
twice).
"""

from __future__ import annotations

import asyncio
from typing import Any

from shardcron.executors.turn_batch import TurnBatcher, Waiting

# A burst larger than this goes out in several round trips: a pipeline's replies are held in memory.
MAX_BATCH = 512


class RedisBatcher(TurnBatcher[tuple[Any, ...]]):
    def __init__(self, client: Any) -> None:
        super().__init__(MAX_BATCH)
        self.client = client

    def send(self, *command: Any) -> asyncio.Future:
        """On the loop: queue ``command``; the future gets its reply, or the error for it alone."""
        return self.submit(command)

    async def aclose(self) -> None:
        await self.wait_sent()
        await self.client.aclose()

    async def send_batch(self, batch: list[Waiting[tuple[Any, ...]]]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for command, _ in batch:
                pipe.execute_command(*command)
            replies = await pipe.execute(raise_on_error=False)
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
