"""PutJob calls sharing one transaction (api/job_puts.py over store.jobs.put_each), on real databases."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from sqlalchemy import select

from shardcron.api import job_puts
from shardcron.api.job_puts import JobPuts
from shardcron.errors import FencedOut, InvalidJob, VersionConflict
from shardcron.spec.job import job_from_dict
from shardcron.store import ensure_shards, get_job, list_jobs, raise_fence
from shardcron.store import jobs as job_store
from shardcron.store.jobs import Put, put_each
from shardcron.store.schema import shard_fences
from tests.support.aio import until

F_OLD, F0, F1 = 50, 100, 300


def make_job(job_id: str, **fields):
    return job_from_dict({"id": job_id, "every": "1m", **fields})


@pytest.fixture
def led(store_engine):
    """Shards 0 and 1 led by this node under F0 and F1."""
    ensure_shards(store_engine, 4)
    raise_fence(store_engine, 0, F0, "n", 1_000)
    raise_fence(store_engine, 1, F1, "n", 1_000)
    return store_engine


def test_each_put_gets_its_own_answer_and_puts_of_one_job_apply_in_turn(led):
    puts = [
        Put(make_job("a"), 0, F0),
        Put(make_job("a", timeout="5s"), 0, F0, expected_version=1),  # sees the first put's version
        Put(make_job("b"), 1, F1, expected_version=3),  # b does not exist: conflict, alone
        Put(replace(make_job("c"), labels={"k" * 300: "v"}), 1, F1),  # a key the label index cannot hold
        Put(make_job("d"), 0, F_OLD),  # an older fence of shard 0 than another put's: stale
        Put(make_job("e"), 1, F1),
    ]
    answers = put_each(led, puts, node_id="n", now_ms=5_000)
    assert [a.version for a in answers[:2]] == [1, 2]
    assert isinstance(answers[2], VersionConflict) and answers[2].actual == 0
    assert isinstance(answers[3], InvalidJob) and answers[3].field == "labels"
    assert isinstance(answers[4], FencedOut) and answers[4].current == F0
    assert answers[5].version == 1 and answers[5].active_since_ms == 5_000
    assert get_job(led, "a").timeout_ms == 5_000 and get_job(led, "a").version == 2
    assert sorted(j.id for j in list_jobs(led)) == ["a", "e"], "the refused puts wrote nothing"


def test_a_shard_whose_fence_moved_is_refused_and_the_others_commit(led):
    raise_fence(led, 1, F1 + 1, "newer", 2_000)
    answers = put_each(led, [Put(make_job("x"), 0, F0), Put(make_job("y"), 1, F1)], node_id="n", now_ms=3_000)
    assert answers[0].version == 1
    assert isinstance(answers[1], FencedOut) and answers[1].current == F1 + 1
    assert [j.id for j in list_jobs(led)] == ["x"]


def fail_the_first_transaction(monkeypatch) -> None:
    broken = [True]
    real = job_store.put_each

    def flaky(engine, puts, **kw):
        if broken.pop() if broken else False:
            raise RuntimeError("connection reset")
        return real(engine, puts, **kw)

    monkeypatch.setattr(job_puts.job_store, "put_each", flaky)


def test_a_failed_transaction_fails_every_call_in_it_and_the_next_caller_commits(led, monkeypatch):
    gc = JobPuts(led, "n")
    fail_the_first_transaction(monkeypatch)
    with pytest.raises(RuntimeError, match="connection reset"):
        asyncio.run(gc.submit(Put(make_job("a"), 0, F0)))
    assert asyncio.run(gc.submit(Put(replace(make_job("a"), timeout_ms=2_000), 0, F0))).version == 1


# -- submit: calls queued on an event loop, one pool thread per batch --------------------------------


def counting(monkeypatch) -> list[int]:
    batches: list[int] = []
    real = job_store.put_each

    def counted(engine, puts, **kw):
        batches.append(len(puts))
        return real(engine, puts, **kw)

    monkeypatch.setattr(job_puts.job_store, "put_each", counted)
    return batches


def test_async_calls_queued_behind_a_commit_share_the_next_one_and_the_scheduler_hears_of_each(led, monkeypatch):
    batches = counting(monkeypatch)
    told: list[tuple[int, str, int]] = []
    pool = ThreadPoolExecutor(2)
    gc = JobPuts(led, "n", pool=pool, written=lambda shard, job: told.append((shard, job.id, job.version)))

    async def scenario():
        # Hold shard 0's fence row so that the first commit waits, while nine more calls queue behind it.
        with led.connect() as blocker, blocker.begin():
            blocker.execute(select(shard_fences.c.fence).where(shard_fences.c.shard == 0).with_for_update())
            first = asyncio.ensure_future(gc.submit(Put(make_job("j0"), 0, F0)))
            await until(lambda: batches == [1], "the first call to start committing")
            rest = [
                asyncio.ensure_future(gc.submit(Put(make_job("same") if i % 2 else make_job(f"j{i}"), 0, F0)))
                for i in range(1, 10)
            ]
            await until(lambda: gc.queued == 9, "nine calls to queue behind the commit")
        return await asyncio.gather(first, *rest, return_exceptions=True)

    try:
        answers = asyncio.run(scenario())
    finally:
        pool.shutdown()
    assert batches == [1, 9], "the nine queued calls were written in one transaction"
    assert all(not isinstance(a, BaseException) for a in answers), answers
    assert sorted(a.version for a in answers[1::2]) == [1, 2, 3, 4, 5], "five puts of one job: five versions"
    assert sorted(told) == sorted((0, a.id, a.version) for a in answers), "the scheduler heard of every write"
    assert gc.queued == 0


def test_async_calls_keep_their_own_answers_and_a_failed_transaction_fails_only_its_batch(led, monkeypatch):
    fail_the_first_transaction(monkeypatch)

    def scheduler_refuses(shard: int, job) -> None:
        if job.id == "refused-by-scheduler":
            raise RuntimeError("scheduler gone")

    gc = JobPuts(led, "n", written=scheduler_refuses)

    async def scenario():
        failed = await asyncio.gather(gc.submit(Put(make_job("a"), 0, F0)), return_exceptions=True)
        later = await asyncio.gather(
            gc.submit(Put(make_job("a"), 0, F0, expected_version=0)),
            gc.submit(Put(make_job("b"), 1, F1, expected_version=3)),
            gc.submit(Put(make_job("c"), 0, F_OLD)),
            gc.submit(Put(make_job("refused-by-scheduler"), 1, F1)),
            return_exceptions=True,
        )
        return failed, later

    (failed,), (a, b, c, refused) = asyncio.run(scenario())
    assert isinstance(failed, RuntimeError) and "connection reset" in str(failed)
    assert a.version == 1, "the failed transaction wrote nothing; the next batch did"
    assert isinstance(b, VersionConflict) and isinstance(c, FencedOut)
    assert isinstance(refused, RuntimeError) and "scheduler gone" in str(refused)
    assert get_job(led, "refused-by-scheduler").version == 1, "stored; only its caller was told of the failure"


def test_an_async_caller_that_goes_away_does_not_stop_the_write_nor_the_others(led):
    gc = JobPuts(led, "n")

    async def scenario():
        calls = [asyncio.ensure_future(gc.submit(Put(make_job(f"k{i}"), 0, F0))) for i in range(3)]
        await asyncio.sleep(0)  # all three queued
        calls[1].cancel()
        return await asyncio.gather(*calls, return_exceptions=True)

    first, gone, last = asyncio.run(scenario())
    assert isinstance(gone, asyncio.CancelledError)
    assert first.version == 1 and last.version == 1
    assert sorted(j.id for j in list_jobs(led)) == ["k0", "k1", "k2"]


def test_a_batch_lingers_only_when_calls_come_together_and_never_past_full(led, monkeypatch):
    batches = counting(monkeypatch)
    monkeypatch.setattr(job_puts, "LINGER_S", 3600.0)  # a linger would outlast the test
    monkeypatch.setattr(job_puts, "MAX_BATCH", 3)
    gc = JobPuts(led, "n")

    async def scenario():
        alone = await gc.submit(Put(make_job("alone"), 0, F0))  # nobody else: written at once
        two = [asyncio.ensure_future(gc.submit(Put(make_job(f"f{i}"), 0, F0))) for i in range(2)]
        await until(lambda: gc.lingering, "two calls together to linger for more")
        third = await gc.submit(Put(make_job("f2"), 0, F0))  # fills the batch: written at once
        return alone, [await two[0], await two[1], third]

    alone, full = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert alone.version == 1 and [j.version for j in full] == [1, 1, 1]
    assert batches == [1, 3], "three calls together: one full batch, written without waiting out the linger"
