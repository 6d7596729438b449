"""A broker outage fails only the jobs that use it (issue 11: "stops Redis or RabbitMQ").

A real node over a real etcd and PostgreSQL runs 20 noop jobs and one
redis-stream job every second. The stream's Redis is a private one on a free
port, with a password (the shared Redis on 6379 is used by other tests and is
never touched). It is shut down for 10 s, then started again on the same port:

* while it is down, the redis-stream ticks end ``failed`` after both attempts,
  with an error naming the masked URL and the refused connection;
* the noop jobs do not notice: every one of their slots in the outage runs,
  on time within a bound generous enough never to flake (the bench measures
  the precise figure; here lateness is a correctness property);
* once Redis is back, the redis-stream job succeeds again, one entry per slot.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections import Counter

import pytest
import redis
from sqlalchemy import select

from shardcron import Client
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.spec.headers import mask_url
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.schema import ticks

pytestmark = pytest.mark.cluster

NOOPS = 20
OUTAGE_S = 10
PASSWORD = "s3cret-outage"
# Far above any honest lateness on a busy 2-core machine, far below a slot delayed by a 10 s outage.
LATENESS_BOUND_MS = 2000


class PrivateRedis:
    """A throw-away redis-server on its own port: no persistence, so a restart starts empty."""

    def __init__(self, tmp_path) -> None:
        self.port = free_port()
        self.dir = tmp_path
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://:{PASSWORD}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with open(self.dir / f"redis-{self.port}.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    "/usr/bin/redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--requirepass",
                    PASSWORD,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.dir),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(lambda: self.client().ping(), 30, 0.1, f"the private redis on port {self.port} to answer")

    def stop(self) -> None:
        """Really stopped (the process gone, the port refusing), not paused."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)


@pytest.fixture
def private_redis(tmp_path):
    r = PrivateRedis(tmp_path)
    r.start()
    yield r
    r.stop()


def _rows(engine, job_prefix: str):
    with engine.connect() as c:
        return c.execute(
            select(
                ticks.c.job_id,
                ticks.c.scheduled_at_ms,
                ticks.c.started_at_ms,
                ticks.c.finished_at_ms,
                ticks.c.status,
                ticks.c.attempt,
                ticks.c.error,
            ).where(ticks.c.job_id.like(f"{job_prefix}%"), ticks.c.manual.is_(False))
        ).all()


def test_a_redis_outage_fails_its_ticks_and_leaves_the_other_jobs_on_time(make_cluster, fresh_db_url, private_redis):
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    node = cluster.add("n0")
    cluster.wait_all_led(60)
    stream = f"outage-{uuid.uuid4().hex[:10]}"
    jobs = [job_from_dict({"id": f"noop-{i:02d}", "every": "1s", "executor": {"kind": "noop"}}) for i in range(NOOPS)]
    jobs.append(
        job_from_dict(
            {
                "id": "stream",
                "every": "1s",
                "timeout": "5s",
                "retry": {"max_attempts": 2, "backoff": "200ms"},
                "executor": {"kind": "redis-stream", "url": private_redis.url, "stream": stream},
            }
        )
    )
    engine = make_engine(db)
    try:
        with Client(node.address) as client:
            for job in jobs:
                client.put_job(job)

        def succeeded_stream_slots(after_ms: int) -> list:
            return [r for r in _rows(engine, "stream") if r.status == "succeeded" and r.scheduled_at_ms > after_ms]

        wait_until(lambda: len(succeeded_stream_slots(0)) >= 2, 60, 0.2, "the redis-stream job to succeed twice")
        before_ms = int(time.time() * 1000)

        private_redis.stop()
        down_ms = int(time.time() * 1000)

        def outage_done() -> bool:
            # The outage lasts OUTAGE_S, and is not over before the failures it must cause are recorded.
            failed = [r for r in _rows(engine, "stream") if r.status == "failed" and r.started_at_ms > down_ms]
            return time.time() * 1000 >= down_ms + OUTAGE_S * 1000 and len(failed) >= 3

        wait_until(outage_done, OUTAGE_S + 60, 0.2, "the outage's failures to be recorded")
        up_ms = int(time.time() * 1000)
        private_redis.start()

        wait_until(
            lambda: len(succeeded_stream_slots(up_ms)) >= 2,
            60,
            0.2,
            "the redis-stream job to succeed again once redis is back",
        )
        settled_to_ms = max(r.scheduled_at_ms for r in succeeded_stream_slots(up_ms))
        stream_rows = _rows(engine, "stream")
        noop_rows = _rows(engine, "noop-")
        entries = private_redis.client().xrange(stream)
    finally:
        engine.dispose()

    # While redis was down, every redis-stream tick that ran failed, after both attempts, saying why.
    during = [
        r
        for r in stream_rows
        if r.started_at_ms and r.started_at_ms > down_ms and r.finished_at_ms and r.finished_at_ms < up_ms
    ]
    assert len(during) >= 3, during
    masked = mask_url(private_redis.url)
    for r in during:
        assert r.status == "failed" and r.attempt == 2, r
        assert masked in r.error and PASSWORD not in r.error, r.error
        assert re.search(r"cannot reach redis|connection refused|error 111", r.error, re.I), r.error

    # The noop jobs: every slot of the outage ran, none late by more than the bound, as before it.
    window = range(-(-down_ms // 1000) * 1000, up_ms - 999, 1000)  # whole seconds inside the outage
    by_slot = {(r.job_id, r.scheduled_at_ms): r for r in noop_rows}
    owed = [(f"noop-{i:02d}", at) for i in range(NOOPS) for at in window]
    assert len(owed) >= NOOPS * (OUTAGE_S - 1)
    not_run = [s for s in owed if s not in by_slot or by_slot[s].status != "succeeded"]
    assert not not_run, f"{len(not_run)} noop slots of the outage did not succeed, e.g. {not_run[:3]}"

    def worst(rows) -> int:
        return max(r.started_at_ms - r.scheduled_at_ms for r in rows)

    before = [r for r in noop_rows if r.scheduled_at_ms < before_ms and r.started_at_ms]
    in_outage = [by_slot[s] for s in owed]
    assert worst(in_outage) < LATENESS_BOUND_MS, (
        f"noop lateness during the outage {worst(in_outage)} ms (before it: {worst(before)} ms)"
    )

    # Back: the stream holds exactly one entry per slot that succeeded after the restart, and nothing else.
    per_slot = Counter((f[b"shardcron_job_id"].decode(), int(f[b"shardcron_scheduled_at_ms"])) for _, f in entries)
    assert all(n == 1 for n in per_slot.values()), per_slot
    after = range(up_ms + 1000, settled_to_ms + 1)
    held = {s for s in per_slot if s[1] in after}
    succeeded = {
        ("stream", r.scheduled_at_ms) for r in stream_rows if r.status == "succeeded" and r.scheduled_at_ms in after
    }
    assert held == succeeded and succeeded
