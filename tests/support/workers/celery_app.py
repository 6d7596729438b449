"""A real Celery worker for the dispatch tests: its one task records every delivery it gets.

    SHARDCRON_TEST_CELERY_BROKER=redis://127.0.0.1:6379/0 SHARDCRON_TEST_RECORD=/tmp/x.jsonl \\
    SHARDCRON_TEST_DEDUPE_PREFIX=sc-test:abc: SHARDCRON_TEST_READY=/tmp/x.ready \\
        celery -A tests.support.workers.celery_app worker -P solo -Q <queue>

Each delivery of ``TASK`` becomes one JSON line in ``SHARDCRON_TEST_RECORD``:
the task id, the tick it carries (job, slot, fence, attempt, read from the
task's headers), and what ``shardcron.consumer`` said about it. The task body is
guarded with the ``dedupe`` decorator, exactly as a user's task would be, so
``admitted`` is true for the one delivery of a slot whose effect ran. The line
is written before the task returns (the worker acks after), so an acked
delivery always has its line. ``SHARDCRON_TEST_READY`` is created once the
worker consumes. Run it with the solo pool: one task at a time, one writer.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from celery import Celery
from celery.signals import worker_ready

from shardcron.consumer import RedisDeduper, TickInfo, Verdict, dedupe

TASK = "shardcron.tests.record"
BROKER_ENV = "SHARDCRON_TEST_CELERY_BROKER"
RECORD_ENV = "SHARDCRON_TEST_RECORD"
READY_ENV = "SHARDCRON_TEST_READY"
PREFIX_ENV = "SHARDCRON_TEST_DEDUPE_PREFIX"
DEDUPE_REDIS_ENV = "SHARDCRON_TEST_DEDUPE_REDIS"
_DEFAULT_REDIS = "redis://127.0.0.1:6379/0"

# set_as_current=False: a test process imports this module for its names, and must not
# find its own default Celery app replaced.
app = Celery("shardcron_test_worker", broker=os.environ.get(BROKER_ENV, _DEFAULT_REDIS), set_as_current=False)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_enable_remote_control=False,  # no pidbox queues left behind in the shared broker
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
)


class _Remembering:
    """The test's RedisDeduper, remembering its last verdict for the record (the solo pool is one thread)."""

    def __init__(self) -> None:
        self.last: Verdict | None = None

    @functools.cached_property
    def inner(self) -> RedisDeduper:
        return RedisDeduper(os.environ.get(DEDUPE_REDIS_ENV, _DEFAULT_REDIS), prefix=os.environ[PREFIX_ENV], ttl_s=3600)

    def admit(self, tick: TickInfo) -> Verdict:
        self.last = self.inner.admit(tick)
        return self.last

    def release(self, tick: TickInfo) -> None:
        self.inner.release(tick)


deduper = _Remembering()


@dedupe(deduper)
def _effect() -> bool:
    """What a user's task would do once per slot; here, just say it ran."""
    return True


@app.task(name=TASK, bind=True)
def record(self, *args, **kwargs) -> None:
    headers = dict(self.request.headers or {})
    tick = TickInfo.from_mapping(headers)
    deduper.last = None
    admitted = _effect() is True
    line = {
        "task_id": self.request.id,
        "job": tick.job_id,
        "slot": tick.scheduled_at_ms,
        "fence": tick.fence,
        "attempt": tick.attempt,
        "node": tick.node_id,
        "admitted": admitted,
        "verdict": deduper.last.value if deduper.last else None,
        "args": list(args),
        "kwargs": kwargs,
        "headers": {k: v for k, v in headers.items() if k.startswith("shardcron_")},
    }
    with open(os.environ[RECORD_ENV], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


@worker_ready.connect
def _say_ready(**_) -> None:
    ready = os.environ.get(READY_ENV)
    if ready:
        Path(ready).touch()
