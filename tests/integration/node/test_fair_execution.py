"""Fair execution on a real node process (real etcd, SQLite, the dev sink in this process):
``--executor-slots 1``, namespace ``flood`` puts 10 slow HTTP runs a second, namespace ``calm``
one noop a second. The sink holds every request until the test lets them go one at a time, so
the flood's backlog builds up first; then calm's ticks are served between the flood's starts,
not after its backlog, each recorded at its real start. Orders of starts are asserted, never durations.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.jobkey import join_key, namespace_of
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.store.engine import make_engine
from shardcron.store.migrate import ensure_schema
from shardcron.store.namespaces import create_namespace
from shardcron.store.schema import ticks
from tests.integration.node.test_cluster import write_jobs

pytestmark = pytest.mark.cluster
FLOOD_JOBS = 10
HELD_S = 3  # seconds of slots that pile up before the first run ends


@pytest.fixture
def held_sink():
    turns = threading.Semaphore(0)
    s = Sink(on_request=lambda r: turns.acquire(timeout=120))
    s.start()
    s.turns = turns
    yield s
    for _ in range(10_000):
        turns.release()
    s.stop()


def create_namespaces(db: str, *names: str) -> None:
    engine = make_engine(db)
    try:
        ensure_schema(engine, auto_upgrade=True)
        for name in names:
            create_namespace(engine, name, NamespaceSettings(), node_id="test", now_ms=0)
    finally:
        engine.dispose()


def started(db: str) -> list:
    engine = make_engine(db)
    try:
        with engine.connect() as c:
            return c.execute(
                select(ticks.c.job_id, ticks.c.scheduled_at_ms, ticks.c.started_at_ms, ticks.c.status)
            ).all()
    finally:
        engine.dispose()


def test_calm_ticks_are_served_between_the_floods_starts(etcd_server, etcd_prefix, tmp_path, held_sink):
    jobs = [
        {
            "id": f"f{i}",
            "namespace": "flood",
            "every": "1s",
            "overlap": "allow",
            "timeout": "120s",
            "executor": {"kind": "http", "url": held_sink.url + "/slow"},
        }
        for i in range(FLOOD_JOBS)
    ]
    jobs.append({"id": "c0", "namespace": "calm", "every": "1s", "executor": {"kind": "noop"}})
    db = f"sqlite:///{tmp_path}/store.db"
    create_namespaces(db, "flood", "calm")  # a job file's namespaces must exist (store/namespaces.py)
    c = Cluster(
        etcd_server.endpoints,
        db,
        etcd_prefix,
        1,
        4,
        str(tmp_path),
        extra_args=["--jobs", write_jobs(tmp_path / "jobs.toml", jobs), "--executor-slots", "1"],
    )
    try:
        c.add("n0")
        c.wait_all_led(60)
        wait_until(lambda: len(held_sink.requests()) == 1, 60, what="the flood's first run to hold the slot")
        held_from_ms = int(time.time() * 1000)
        calm = join_key("calm", "c0")

        def calm_waiting() -> list:
            return [r for r in started(db) if r.job_id == calm and r.scheduled_at_ms > held_from_ms]

        wait_until(
            lambda: len(calm_waiting()) >= HELD_S and time.time() * 1000 > held_from_ms + HELD_S * 1000,
            60,
            what="calm's slots to pile up behind the held slot",
        )
        owed = sorted(r.scheduled_at_ms for r in calm_waiting())[:HELD_S]
        assert all(r.started_at_ms is None for r in calm_waiting()), "nothing may start while the one slot is held"
        release_from_ms = int(time.time() * 1000)
        # Let the flood's runs end one at a time, until calm's owed ticks have all run.
        for n in range(2, 60):
            held_sink.turns.release()
            wait_until(lambda: len(held_sink.requests()) >= n, 60, what=f"the flood's run {n} to start")
            done = {
                r.scheduled_at_ms: r
                for r in started(db)
                if r.job_id == calm and r.scheduled_at_ms in owed and r.status == "succeeded"
            }
            if len(done) == len(owed):
                break
        rows = started(db)
        calm_starts = sorted(r.started_at_ms for r in rows if r.job_id == calm and r.scheduled_at_ms in owed)
        flood_starts = sorted(r.started_at_ms for r in rows if namespace_of(r.job_id) == "flood" and r.started_at_ms)
        assert len(calm_starts) == HELD_S and all(calm_starts), "none of calm's owed ticks dropped"
        assert all(s >= release_from_ms for s in calm_starts), "each recorded at its real start, not its slot"
        # By then the flood owed well over 10 runs a second for HELD_S seconds; fair queuing served calm's
        # backlog of HELD_S ticks in turn with it: each of them after at most 2 more of the flood's starts.
        flood_before = [sum(1 for f in flood_starts if f < s) for s in calm_starts]
        assert flood_before[-1] <= 1 + 2 * HELD_S, (flood_before, len(flood_starts))
        assert (
            sum(1 for r in rows if namespace_of(r.job_id) == "flood" and r.scheduled_at_ms <= owed[-1])
            >= FLOOD_JOBS * HELD_S
        ), "the flood's backlog was there to be overtaken"
    finally:
        for _ in range(10_000):
            held_sink.turns.release()
        c.stop_all()
    assert "Traceback" not in c.nodes["n0"].log_text(), c.nodes["n0"].log_text()[-4000:]
