"""Group commit of PutJob calls (api/group_commit.py over store.jobs.put_each), on real databases."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from sqlalchemy import select

from shardcron.api import group_commit
from shardcron.api.group_commit import GroupCommit
from shardcron.errors import FencedOut, InvalidJob, VersionConflict
from shardcron.jobspec import job_from_dict
from shardcron.store import ensure_shards, get_job, list_jobs, raise_fence
from shardcron.store import jobs as job_store
from shardcron.store.jobs import Put, put_each
from shardcron.store.schema import shard_fences
from shardcron.dev.testing.cluster import wait_until

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


def test_concurrent_calls_share_a_transaction(led, monkeypatch):
    batches: list[int] = []
    real = job_store.put_each

    def counted(engine, puts, **kw):
        batches.append(len(puts))
        return real(engine, puts, **kw)

    monkeypatch.setattr(group_commit.job_store, "put_each", counted)
    gc = GroupCommit(led, "n")
    answers: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            answers[i] = gc.put(Put(make_job("same") if i % 2 else make_job(f"j{i}"), 0, F0))
        except Exception as e:  # noqa: BLE001 - recorded and asserted on below
            answers[i] = e

    # Hold shard 0's fence row so that the first commit waits, while nine more calls queue behind it.
    with led.connect() as blocker, blocker.begin():
        blocker.execute(select(shard_fences.c.fence).where(shard_fences.c.shard == 0).with_for_update())
        threads = [threading.Thread(target=call, args=(i,)) for i in range(10)]
        threads[0].start()
        wait_until(lambda: batches == [1], 30, what="the first call to start committing")
        for t in threads[1:]:
            t.start()
        wait_until(lambda: gc.queued == 9, 30, what="nine calls to queue behind the commit")
    for t in threads:
        t.join(60)
    assert batches == [1, 9], "the nine queued calls were written in one transaction"
    assert all(not isinstance(a, Exception) for a in answers.values()), answers
    same = sorted(a.version for i, a in answers.items() if i % 2)
    assert same == [1, 2, 3, 4, 5], "five puts of one job: five versions, none lost"
    assert get_job(led, "same").version == 5


def test_a_failed_transaction_fails_every_call_in_it_and_the_next_caller_commits(led, monkeypatch):
    gc = GroupCommit(led, "n")
    broken = [True]
    real = job_store.put_each

    def flaky(engine, puts, **kw):
        if broken.pop() if broken else False:
            raise RuntimeError("connection reset")
        return real(engine, puts, **kw)

    monkeypatch.setattr(group_commit.job_store, "put_each", flaky)
    with pytest.raises(RuntimeError, match="connection reset"):
        gc.put(Put(make_job("a"), 0, F0))
    assert gc.put(Put(replace(make_job("a"), timeout_ms=2_000), 0, F0)).version == 1
