"""Running marks group-committed by the tick writer (leader/marks.py over store.tick_results.mark_running_many),
on real databases."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select

from shardcron.errors import FencedOut
from shardcron.leader import marks as marks_module
from shardcron.leader.marks import RunningMark, RunningMarks
from shardcron.leader.tick_writer import TickWriter
from shardcron.model import SlotRef, TickStatus
from shardcron.store import ensure_shards, list_ticks, raise_fence
from shardcron.store.schema import shard_fences
from shardcron.store.ticks import SlotClaim, claim_ticks
from tests.support.aio import until

F0, F1 = 100, 300
SLOTS = [60_000 * k for k in range(1, 9)]


@pytest.fixture
def led(store_engine):
    """Shards 0 and 1 led under F0 and F1, with slots of job a (shard 0) and b (shard 1) claimed."""
    ensure_shards(store_engine, 2)
    raise_fence(store_engine, 0, F0, "n", 1_000)
    raise_fence(store_engine, 1, F1, "n", 1_000)
    claim_ticks(store_engine, [SlotClaim("a", s) for s in SLOTS], shard=0, fence=F0, node_id="n", now_ms=1_000)
    claim_ticks(store_engine, [SlotClaim("b", s) for s in SLOTS], shard=1, fence=F1, node_id="n", now_ms=1_000)
    return store_engine


def test_marks_that_wait_together_share_a_transaction_and_each_learns_its_shards_fate(led, monkeypatch):
    batches: list[int] = []
    real = marks_module.tick_results.mark_running_many

    def counted(engine, groups):
        batches.append(sum(len(v) for v in groups.values()))
        return real(engine, groups)

    monkeypatch.setattr(marks_module.tick_results, "mark_running_many", counted)
    marks = RunningMarks(led)
    writer = TickWriter([marks])
    writer.start()

    async def mark(job: str, shard: int, fence: int, slot: int) -> object:
        try:
            return await marks.mark(RunningMark(shard, fence, SlotRef(job, slot), 1, 2_000))
        except Exception as e:  # noqa: BLE001 - returned and asserted on below
            return e

    async def scenario() -> dict[tuple[str, int], object]:
        raise_fence(led, 1, F1 + 1, "newer", 1_500)  # shard 1 has a newer leader: b's marks are stale
        # Hold shard 0's fence row: the first mark's commit waits, the other fifteen queue behind it.
        with led.connect() as blocker, blocker.begin():
            blocker.execute(select(shard_fences.c.fence).where(shard_fences.c.shard == 0).with_for_update())
            first = asyncio.ensure_future(mark("a", 0, F0, SLOTS[0]))
            await until(lambda: batches == [1], "the first mark to start committing")
            rest = [asyncio.ensure_future(mark("a", 0, F0, s)) for s in SLOTS[1:]] + [
                asyncio.ensure_future(mark("b", 1, F1, s)) for s in SLOTS
            ]
            await until(lambda: marks.queued == 15, "fifteen marks to queue behind the commit")
        got = await asyncio.gather(first, *rest)
        return dict(zip([("a", s) for s in SLOTS] + [("b", s) for s in SLOTS], got, strict=True))

    try:
        answers = asyncio.run(scenario())
    finally:
        writer.close()
    assert batches == [1, 15], "the fifteen queued marks were written in one transaction"
    assert all(answers[("a", s)] is None for s in SLOTS), answers
    assert all(isinstance(answers[("b", s)], FencedOut) and answers[("b", s)].current == F1 + 1 for s in SLOTS)
    assert {t.status for t in list_ticks(led, "a")} == {TickStatus.RUNNING}
    assert {t.status for t in list_ticks(led, "b")} == {TickStatus.CLAIMED}, "a fenced shard's marks write nothing"


def test_a_lone_mark_is_written_at_once_and_marks_that_come_together_wait_for_more(led):
    """The linger (marks.LINGER_S) applies only once marks come together; a full batch does not wait.
    A 30 s linger, and the writer's side stepped by hand: nothing here depends on timing."""
    linger = 30.0
    marks = RunningMarks(led, linger_s=linger, max_batch=3)

    async def scenario() -> list[str]:
        seen: list[str] = []

        def when_ready(what: str) -> None:
            now = time.monotonic()
            at = marks.ready_at(now, closing=False)
            assert at is not None
            seen.append(f"{what}: {'at once' if at <= now else 'lingers'}")

        async def queue(*slots: int) -> list[asyncio.Future]:
            futures = [asyncio.ensure_future(marks.mark(RunningMark(0, F0, SlotRef("a", s), 1, 2_000))) for s in slots]
            await asyncio.sleep(0)  # each reaches the queue
            return futures

        async def write(futures: list[asyncio.Future]) -> None:
            assert marks.write_next() is None
            await asyncio.gather(*futures)

        lone = await queue(SLOTS[0])
        when_ready("one mark")
        await write(lone)
        pair = await queue(SLOTS[1], SLOTS[2])
        when_ready("two marks")
        await write(pair)
        after_pair = await queue(SLOTS[3])
        when_ready("one mark after a batch of two")
        await write(after_pair)
        after_lone = await queue(SLOTS[4])
        when_ready("one mark after a batch of one")
        await write(after_lone)
        full = await queue(*SLOTS[5:8])
        when_ready("a full batch")
        await write(full)
        return seen

    assert asyncio.run(scenario()) == [
        "one mark: at once",
        "two marks: lingers",
        "one mark after a batch of two: lingers",
        "one mark after a batch of one: at once",
        "a full batch: at once",
    ]
    assert {t.status for t in list_ticks(led, "a")} == {TickStatus.RUNNING}
