"""A job put again while its run is in flight keeps running (issue 10, "The bug").

A real node over a real etcd and each database, an http job every second
against the dev sink's ``/slow/1500``: every run outlives one slot, so with
``overlap = "skip"`` the honest pattern is one run, one skip, one run... The
job is changed (a label added) while its first run is in flight; the slots
after the change must still run. Before the fix the finished run decremented
a replaced entry, the new one believed a run was going forever, and every
later slot was recorded ``skipped: overlap policy``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from shardcron import Client
from shardcron.audit import run_audit
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import TickStatus
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.tick_reads import list_ticks

pytestmark = pytest.mark.cluster


@pytest.fixture
def sink():
    with Sink() as s:
        yield s


def _ticks_after(engine, job_id: str, after_ms: int):
    return [t for t in list_ticks(engine, job_id, limit=100) if t.scheduled_at_ms > after_ms]


def test_a_job_put_again_mid_run_still_runs_its_later_slots(make_cluster, db_url, sink):
    cluster = make_cluster(db_url, shards=1)
    node = cluster.add("n0")
    cluster.wait_all_led(60)
    job = job_from_dict(
        {"id": "slow", "every": "1s", "overlap": "skip", "executor": {"kind": "http", "url": sink.url + "/slow/1500"}}
    )
    engine = make_engine(db_url)
    try:
        with Client(node.address) as client:
            client.put_job(job)
            # The sink records a request before its /slow wait: the first run is in flight now.
            wait_until(lambda: sink.requests(), 30, what="the first run to reach the sink")
            stored = client.put_job(replace(job, labels={"changed": "yes"}))
        changed_at = stored.active_since_ms

        def two_runs_after_the_change():
            done = [t for t in _ticks_after(engine, "slow", changed_at) if t.status is TickStatus.SUCCEEDED]
            return len(done) >= 2

        try:
            wait_until(two_runs_after_the_change, 45, 0.2, what="two slots after the re-put to succeed")
        except TimeoutError as e:
            seen = Counter(
                f"{t.status.value}: {t.error}" if t.error else t.status.value
                for t in _ticks_after(engine, "slow", changed_at)
            )
            pytest.fail(f"{e}; the ticks after the re-put: {dict(seen)}", pytrace=False)
        later = _ticks_after(engine, "slow", changed_at)
        last = max(t.scheduled_at_ms for t in later)
        report = run_audit(engine, from_ms=changed_at - 5_000, to_ms=last)
        assert report.clean(), report.to_dict()
    finally:
        engine.dispose()
