"""A shard's burst of ticks, as the executors meet it: every tick started in the same turn of one loop."""

from __future__ import annotations

import asyncio

from shardcron.runtime.latch import Latch

TICK_TIMEOUT_S = 20.0  # each tick's own deadline: far longer than a local broker takes
BURST_WITHIN_S = 60.0  # the whole burst's


def burst(loop, executor, plan) -> list:
    """The results of ``executor.run_async`` for every ``(spec, tick)`` of ``plan``, all started in one turn of
    ``loop`` (a LoopThread or a NodeLoop), in ``plan``'s order."""

    async def together():
        return await asyncio.gather(*(executor.run_async(s, t, TICK_TIMEOUT_S, Latch()) for s, t in plan))

    return loop.run(together, BURST_WITHIN_S)
