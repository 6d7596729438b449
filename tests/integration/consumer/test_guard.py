"""shardcron.consumer against real Redis, PostgreSQL, MariaDB and SQLite, and under real Celery, RQ and arq workers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert, select
from sqlalchemy.orm import Session

from shardcron.consumer import RedisDeduper, SqlDeduper, TickInfo, Verdict
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import TickContext
from shardcron.store.engine import make_engine
from tests.support.processes import stop_process
from tests.support.workers import dedupe_app

pytestmark = pytest.mark.timeout(180)

REDIS_URL = os.environ.get("SHARDCRON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[3]
THREADS = 8


def tick(job_id: str, at_ms: int, fence: int, attempt: int = 1) -> TickInfo:
    return TickInfo(job_id=job_id, scheduled_at_ms=at_ms, attempt=attempt, fence=fence, shard=0, node_id="n0")


@pytest.fixture
def job_id() -> str:
    return f"job-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    prefix = f"test:dedupe:{uuid.uuid4().hex[:8]}:"
    yield client, prefix
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


@pytest.fixture(params=["redis", "postgresql", "mariadb", "sqlite"])
def deduper(request, redis_client, fresh_db_url):
    if request.param == "redis":
        client, prefix = redis_client
        yield RedisDeduper(client, prefix=prefix)
        return
    d = SqlDeduper(fresh_db_url(request.param))
    yield d
    d.engine.dispose()


def test_first_then_duplicate_then_stale_fence(deduper, job_id):
    assert deduper.admit(tick(job_id, 1000, fence=10)) is Verdict.FIRST
    assert deduper.admit(tick(job_id, 1000, fence=10, attempt=2)) is Verdict.DUPLICATE
    assert deduper.admit(tick(job_id, 2000, fence=10)) is Verdict.FIRST
    # A higher fence deposes fence 10: a new slot is FIRST, a retried one a duplicate.
    assert deduper.admit(tick(job_id, 3000, fence=12)) is Verdict.FIRST
    assert deduper.admit(tick(job_id, 2000, fence=12, attempt=2)) is Verdict.DUPLICATE
    # The deposed leader's late messages, for a new slot or an old one.
    assert deduper.admit(tick(job_id, 4000, fence=10)) is Verdict.STALE_FENCE
    assert deduper.admit(tick(job_id, 1000, fence=10)) is Verdict.STALE_FENCE
    # Other jobs keep their own fences.
    assert deduper.admit(tick(f"{job_id}-other", 4000, fence=3)) is Verdict.FIRST


def test_a_higher_fence_seen_on_a_duplicate_still_deposes_the_lower(deduper, job_id):
    assert deduper.admit(tick(job_id, 1000, fence=10)) is Verdict.FIRST
    assert deduper.admit(tick(job_id, 1000, fence=11, attempt=2)) is Verdict.DUPLICATE
    assert deduper.admit(tick(job_id, 2000, fence=10)) is Verdict.STALE_FENCE


def test_concurrent_admissions_of_one_slot_admit_exactly_one(deduper, job_id):
    barrier = threading.Barrier(THREADS)

    def admit(i: int) -> Verdict:
        barrier.wait(timeout=30)
        return deduper.admit(tick(job_id, 5000, fence=20, attempt=1 + i % 2))

    with ThreadPoolExecutor(THREADS) as pool:
        verdicts = list(pool.map(admit, range(THREADS)))
    assert sorted(verdicts) == sorted([Verdict.FIRST] + [Verdict.DUPLICATE] * (THREADS - 1))


def test_concurrent_admissions_of_a_new_fence_and_an_old_one(deduper, job_id):
    """Racing leaders: the higher fence always wins its slot; the lower is refused once the higher is seen."""
    assert deduper.admit(tick(job_id, 1000, fence=5)) is Verdict.FIRST
    barrier = threading.Barrier(THREADS)

    def admit(i: int) -> tuple[int, Verdict]:
        fence = 5 if i % 2 else 6
        barrier.wait(timeout=30)
        return fence, deduper.admit(tick(job_id, 2000, fence=fence))

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(admit, range(THREADS)))
    assert [v for _, v in results].count(Verdict.FIRST) == 1
    assert deduper.admit(tick(job_id, 3000, fence=5)) is Verdict.STALE_FENCE


@pytest.mark.parametrize("kind", ["postgresql", "mariadb", "sqlite"])
def test_sql_record_commits_and_rolls_back_with_the_callers_transaction(kind, fresh_db_url, job_id):
    engine = make_engine(fresh_db_url(kind))
    effects = Table("effects", MetaData(), Column("n", Integer, primary_key=True))
    effects.create(engine)
    deduper = SqlDeduper(engine)
    try:
        # The consumer crashes after admitting, before committing: neither the
        # effect nor the record survive, and the redelivery is FIRST.
        with pytest.raises(RuntimeError), engine.begin() as conn:
            assert deduper.admit(tick(job_id, 1000, fence=3), connection=conn) is Verdict.FIRST
            conn.execute(insert(effects).values(n=1))
            raise RuntimeError("consumer died")
        with Session(engine) as session, session.begin():
            assert deduper.admit(tick(job_id, 1000, fence=3, attempt=2), connection=session) is Verdict.FIRST
            session.execute(insert(effects).values(n=2))
        with engine.begin() as conn:
            assert deduper.admit(tick(job_id, 1000, fence=3, attempt=2), connection=conn) is Verdict.DUPLICATE
        with engine.connect() as conn:
            assert conn.execute(select(effects.c.n)).scalars().all() == [2]
    finally:
        engine.dispose()


def test_sql_with_a_plain_engine_and_table_prefix(fresh_db_url, job_id):
    """A consumer's own engine (not shardcron's), SQLite's stock driver settings included."""
    engine = create_engine(fresh_db_url("sqlite"))
    try:
        a = SqlDeduper(engine, table_prefix="app_dedupe")
        b = SqlDeduper(engine, table_prefix="app_dedupe")  # tables already there: no error
        assert a.admit(tick(job_id, 1000, fence=1)) is Verdict.FIRST
        assert b.admit(tick(job_id, 1000, fence=1)) is Verdict.DUPLICATE
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT job_id, fence FROM app_dedupe_slots").all() == [(job_id, 1)]
    finally:
        engine.dispose()


def test_redis_keys_expire(redis_client, job_id):
    client, prefix = redis_client
    d = RedisDeduper(client, prefix=prefix, ttl_s=60)
    assert d.admit(tick(job_id, 1000, fence=1)) is Verdict.FIRST
    keys = sorted(k.decode() for k in client.scan_iter(f"{prefix}*"))
    assert keys == [f"{prefix}{{{job_id}}}:fence", f"{prefix}{{{job_id}}}:slot:1000"]
    assert all(0 < client.pttl(k) <= 60_000 for k in keys)


# --- the decorator, under real workers -------------------------------------------------


def _ctx(job_id: str, fence: int = 9) -> TickContext:
    return TickContext(job_id=job_id, scheduled_at_ms=1_767_225_600_000, attempt=1, fence=fence, shard=0, node_id="n0")


@pytest.fixture
def worker_env(redis_client):
    """Where the workers' task bodies record their runs, and the prefix their deduper uses."""
    client, prefix = redis_client
    env = {**os.environ, "PYTHONPATH": str(ROOT), dedupe_app.PREFIX_ENV: prefix, dedupe_app.REDIS_ENV: REDIS_URL}
    return client, prefix, env


def _runs(client, prefix) -> list[str]:
    return [r.decode() for r in client.lrange(f"{prefix}{dedupe_app.RUNS}", 0, -1)]


def _stop(proc: subprocess.Popen) -> str:
    stop_process(proc, 20)
    return proc.stdout.read().decode(errors="replace") if proc.stdout else ""


def test_celery_task_runs_once_per_slot(worker_env, job_id):
    client, prefix, env = worker_env
    queue = f"dedupe-{uuid.uuid4().hex[:10]}"
    app = dedupe_app.make_celery(REDIS_URL)
    ctx = _ctx(job_id)
    # The same slot twice (a successor's retry), then a deposed leader's message for a new slot.
    results = [
        app.send_task(dedupe_app.CELERY_TASK, args=[job_id, "a"], queue=queue, headers=tick_fields(ctx)),
        app.send_task(
            dedupe_app.CELERY_TASK,
            args=[job_id, "b"],
            queue=queue,
            headers=tick_fields(TickContext(**{**ctx.__dict__, "attempt": 2})),
        ),
        app.send_task(
            dedupe_app.CELERY_TASK,
            args=[job_id, "c"],
            queue=queue,
            headers=tick_fields(TickContext(**{**ctx.__dict__, "scheduled_at_ms": 1, "fence": 8})),
        ),
        # The old nested form, which Celery exposes only in task.request.headers.
        app.send_task(dedupe_app.CELERY_TASK, args=[job_id, "d"], queue=queue, headers={"headers": tick_fields(ctx)}),
    ]
    proc = _celery_worker(queue, env)
    try:
        outcomes = [r.get(timeout=90) for r in results]
    finally:
        log = _stop(proc)
    assert outcomes == [f"{job_id}:a", None, None, None], log
    assert _runs(client, prefix) == [f"celery {job_id}:a"], log
    assert log.count(f"not run: job {job_id}") == 3, log
    assert log.count("duplicate") == 2 and log.count("stale-fence") == 1, log


def test_celery_task_called_without_a_tick_fails_as_not_a_tick(worker_env, job_id):
    """A guarded task called by hand, not by shardcron: the worker reports NotATick, by its own name."""
    client, prefix, env = worker_env
    queue = f"dedupe-{uuid.uuid4().hex[:10]}"
    app = dedupe_app.make_celery(REDIS_URL)
    result = app.send_task(dedupe_app.CELERY_TASK, args=[job_id, "by-hand"], queue=queue)
    proc = _celery_worker(queue, env)
    try:
        with pytest.raises(Exception, match="not a shardcron tick"):
            result.get(timeout=90)
    finally:
        log = _stop(proc)
    assert _runs(client, prefix) == [], log
    assert "raised unexpected: NotATick(" in log, log


def _celery_worker(queue: str, env: dict[str, str]) -> subprocess.Popen:
    """A real Celery worker of ``dedupe_app`` on ``queue``, one task at a time, its log on stdout."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.support.workers.dedupe_app",
            "worker",
            "-Q",
            queue,
            "--pool",
            "solo",
            "-n",
            f"{queue}@%h",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_rq_job_runs_once_per_slot(worker_env, job_id):
    from rq import Queue

    client, prefix, env = worker_env
    queue = Queue(f"dedupe-{uuid.uuid4().hex[:10]}", connection=client)
    meta = {"shardcron": tick_fields(_ctx(job_id))}
    # Two jobs of the same slot under different ids: what a broker without dedupe would deliver.
    for suffix in ("a", "b"):
        queue.enqueue_job(
            queue.create_job(
                dedupe_app.rq_task, args=[job_id, suffix], meta=meta, job_id=f"{slot_uuid(_ctx(job_id))}-{suffix}"
            )
        )
    proc = subprocess.run(
        [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", REDIS_URL, queue.name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    log = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, log
    assert _runs(client, prefix) == [f"rq {job_id}:a"], log
    queue.delete(delete_jobs=True)


def test_arq_function_runs_once_per_slot(worker_env, job_id, monkeypatch):
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    client, prefix, _env = worker_env
    monkeypatch.setenv(dedupe_app.PREFIX_ENV, prefix)
    monkeypatch.setenv(dedupe_app.REDIS_ENV, REDIS_URL)
    queue = f"arq:dedupe-{uuid.uuid4().hex[:10]}"
    settings = RedisSettings.from_dsn(REDIS_URL)

    async def main() -> None:
        pool = await create_pool(settings, default_queue_name=queue)
        try:
            for suffix in ("a", "b"):  # distinct arq job ids, so arq's own dedupe does not hide the second
                await pool.enqueue_job(
                    "arq_task", job_id, suffix, tick=tick_fields(_ctx(job_id)), _job_id=f"{job_id}-{suffix}"
                )
            worker = Worker(
                functions=[dedupe_app.arq_task],
                redis_pool=pool,
                queue_name=queue,
                burst=True,
                handle_signals=False,
                poll_delay=0.1,
            )
            await worker.main()
            assert (worker.jobs_complete, worker.jobs_failed) == (2, 0)
        finally:
            await pool.delete(queue)
            await pool.aclose()

    asyncio.run(main())
    # arq runs both jobs at once: either may be admitted, never both.
    assert _runs(client, prefix) in ([f"arq {job_id}:a"], [f"arq {job_id}:b"])
