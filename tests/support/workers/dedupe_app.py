"""Task functions guarded by ``shardcron.consumer``, for real Celery, RQ and arq workers in tests.

Each body appends ``"<framework> <job>:<suffix>"`` to the Redis list
``<prefix>runs``, so a test counts the runs. The prefix (the deduper's keys
and that list) comes from the environment at call time, so every test uses
its own: ``SHARDCRON_TEST_DEDUPE_PREFIX`` and ``SHARDCRON_TEST_DEDUPE_REDIS``.

Celery: ``celery -A tests.support.workers.dedupe_app worker -Q <queue>``.
"""

from __future__ import annotations

import functools
import os

import redis
from celery import Celery

from shardcron.consumer import RedisDeduper, TickInfo, Verdict, dedupe

PREFIX_ENV = "SHARDCRON_TEST_DEDUPE_PREFIX"
REDIS_ENV = "SHARDCRON_TEST_DEDUPE_REDIS"
RUNS = "runs"
CELERY_TASK = "tests.support.workers.dedupe_app.celery_task"
_DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


@functools.cache
def _deduper(url: str, prefix: str) -> RedisDeduper:
    return RedisDeduper(url, prefix=prefix)


class _FromEnv:
    """The test's RedisDeduper, chosen when a task runs (the module is imported before the test sets the prefix)."""

    def admit(self, tick: TickInfo) -> Verdict:
        return _deduper(*_where()).admit(tick)

    def release(self, tick: TickInfo) -> None:
        _deduper(*_where()).release(tick)


def _where() -> tuple[str, str]:
    return os.environ.get(REDIS_ENV, _DEFAULT_REDIS), os.environ[PREFIX_ENV]


def _record(what: str) -> None:
    url, prefix = _where()
    redis.Redis.from_url(url).rpush(f"{prefix}{RUNS}", what)


def make_celery(url: str) -> Celery:
    app = Celery("dedupe_app", broker=url, backend=url)
    app.conf.update(result_expires=600, broker_connection_retry_on_startup=True)
    return app


app = make_celery(os.environ.get(REDIS_ENV, _DEFAULT_REDIS))
deduper = _FromEnv()


@app.task(name=CELERY_TASK)
@dedupe(deduper)
def celery_task(job_id: str, suffix: str) -> str:
    _record(f"celery {job_id}:{suffix}")
    return f"{job_id}:{suffix}"


@dedupe(deduper)
def rq_task(job_id: str, suffix: str) -> str:
    _record(f"rq {job_id}:{suffix}")
    return f"{job_id}:{suffix}"


@dedupe(deduper)
async def arq_task(ctx: dict, job_id: str, suffix: str) -> str:
    _record(f"arq {job_id}:{suffix}")
    return f"{job_id}:{suffix}"
