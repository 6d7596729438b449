"""etcd rebuilt under a running store: the node refuses to claim, `fences rebase` recovers."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import EtcdCluster
from shardcron.store.engine import make_engine
from shardcron.store.schema import ticks
from tests.integration.node.test_cluster import assert_every_slot_once, write_jobs
from tests.support.clusters import assert_no_traceback

pytestmark = pytest.mark.cluster


def test_a_rebuilt_etcd_is_refused_until_the_fences_are_rebased(tmp_path, fresh_db_url):
    db = fresh_db_url("postgresql")
    jobs = write_jobs(tmp_path / "jobs.toml", [{"id": "tick", "every": "1s", "executor": {"kind": "noop"}}])
    engine = make_engine(db)

    def max_fence():
        with engine.connect() as c:
            return c.execute(select(func.max(ticks.c.fence))).scalar() or 0

    def count():
        with engine.connect() as c:
            return c.execute(select(func.count()).select_from(ticks)).scalar()

    old = EtcdCluster(1).start()
    c = Cluster(old.endpoints, db, "/cron", 2, 4, str(tmp_path), extra_args=["--jobs", jobs])
    try:
        c.add("n0")
        wait_until(lambda: count() >= 3, 60, what="ticks under the first etcd")
        # Drive the first cluster's revisions well above where a fresh one starts.
        from shardcron.coordination.etcd import Etcd

        e = Etcd(old.endpoints)
        for i in range(50):
            e.put(f"/filler/{i}", b"x")
        e.close()
        c.nodes["n0"].terminate()
        c.add("n0b")
        wait_until(lambda: count() >= 6, 60, what="more ticks")
        c.nodes["n0b"].terminate()
    finally:
        old.stop()
    fence_before = max_fence()

    new = EtcdCluster(1).start()  # a rebuilt etcd: new cluster id, revisions from 1
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "shardcron",
                "node",
                "--etcd",
                new.endpoints,
                "--db",
                db,
                "--shards",
                "2",
                "--listen",
                "127.0.0.1:0",
                "--jobs",
                jobs,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 1
        assert "etcd has forgotten" in out.stderr and "fences rebase" in out.stderr
        assert "Traceback" not in out.stderr

        rebase = subprocess.run(
            [sys.executable, "-m", "shardcron", "fences", "rebase", "--etcd", new.endpoints, "--db", db],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert rebase.returncode == 0, rebase.stderr

        resumed_at = time.time() * 1000
        c2 = Cluster(new.endpoints, db, "/cron", 2, 4, str(tmp_path), extra_args=["--jobs", jobs])
        try:
            c2.add("n1")
            wait_until(lambda: max_fence() > fence_before, 60, what="ticks under the rebased fences")
            wait_until(lambda: count() > 0 and _latest(engine) > resumed_at + 2000, 60, what="ticking again")
            assert_every_slot_once(engine, "tick")  # the outage was caught up, nothing doubled
            shards = subprocess.run(
                [sys.executable, "-m", "shardcron", "shards", "--etcd", new.endpoints, "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            import json

            assert all(r["fence"] > fence_before for r in json.loads(shards.stdout)["shards"])
        finally:
            c2.stop_all()
            assert_no_traceback(c2)
    finally:
        new.stop()
        engine.dispose()


def _latest(engine) -> int:
    with engine.connect() as c:
        return c.execute(select(func.max(ticks.c.scheduled_at_ms))).scalar() or 0
