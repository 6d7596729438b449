"""What every batched broker kind shares: the slots handed over in one loop turn go out as one batch.

A tick's coroutine ``submit``s its slot's item (a Redis command, an AMQP
message, a Celery task) and awaits the future it gets back. The first item of
a loop turn schedules a flush with ``call_soon``, so every tick that reaches
the batcher in the same turn (a burst of one shard's slots) rides in the same
batch; ``max_batch`` items flush at once. A flush is a task of its own, not
the ticks': a tick cancelled while it waits drops its future and leaves the
others' batch alone. An item whose future is already done when its batch is
flushed (its tick was cancelled or timed out) is left out.

The kind's ``send_batch`` sends one batch and gives each item's future its own
outcome, so one slot's failure fails that slot only. When ``send_batch``
raises, every future it left unresolved gets that error: the batch as a whole
failed (a broken connection, a closed pool).

Used on the loop only. ``flushes`` and ``items_sent`` count batches and items,
for tests.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")

# One waiting slot: its item, and the future its tick awaits.
Waiting = tuple[T, asyncio.Future]


class TurnBatcher(Generic[T]):
    def __init__(self, max_batch: int) -> None:
        self.max_batch = max_batch
        self.flushes = 0
        self.items_sent = 0
        self._pending: list[Waiting[T]] = []
        self._flush_scheduled = False
        self._sending: set[asyncio.Task] = set()

    def submit(self, item: T) -> asyncio.Future:
        """On the loop: queue ``item`` for this turn's batch; the future gets its own outcome."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    async def send_batch(self, batch: list[Waiting[T]]) -> None:
        """The kind's: send ``batch`` and resolve each of its futures that is not done yet."""
        raise NotImplementedError

    async def wait_sent(self) -> None:
        """Wait for the batches already flushed (before a close)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def stop_sending(self) -> None:
        """Stop the batches already flushed from waiting (their slots fail), and wait for them to end."""
        for task in self._sending:
            task.cancel()
        await self.wait_sent()

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._pending = self._pending, []
        batch = [(item, future) for item, future in batch if not future.done()]  # cancelled ticks
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[Waiting[T]]) -> None:
        self.flushes += 1
        self.items_sent += len(batch)
        try:
            await self.send_batch(batch)
        except BaseException as e:  # noqa: BLE001 - the whole batch failed: every slot of it hears why
            _fail_unresolved(batch, e if isinstance(e, Exception) else ConnectionError(repr(e)))
            if not isinstance(e, Exception):
                raise
        else:  # a slot the kind gave no outcome must not wait for its tick's deadline
            _fail_unresolved(batch, RuntimeError("the batch gave this slot no outcome"))


def _fail_unresolved(batch: list[Waiting[T]], failure: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(failure)
