"""Online resharding under load: 16 -> 64 -> 8 shards, every slot of every job exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from shardcron.dev.testing.cluster import Cluster, wait_until
from tests.integration.coordination.test_scale_out import audit
from tests.support.clusters import stopped_after

pytestmark = pytest.mark.cluster
TTL = 4


def shardcron(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcron", *args], capture_output=True, text=True, timeout=timeout)


def test_reshard_up_and_down_under_load_keeps_every_slot_exactly_once(tmp_path, etcd_server, etcd_prefix, fresh_db_url):
    db = fresh_db_url("postgresql")
    jobs = tmp_path / "jobs.json"
    jobs.write_text(
        json.dumps({"jobs": [{"id": f"r-{i:03d}", "every": "1s", "executor": {"kind": "noop"}} for i in range(60)]})
    )
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 16, TTL, str(tmp_path), extra_args=["--jobs", str(jobs)])
    etcd_args = ["--etcd", etcd_server.endpoints, "--prefix", etcd_prefix]
    with stopped_after(c):
        c.add("n0")
        c.add("n1")
        c.wait_balanced({"n0", "n1"}, 90)
        started_ms = int(time.time() * 1000)

        # While a request is out, `shardcron shards` says so; --abort takes it back.
        from shardcron.coordination.etcd import Etcd

        e = Etcd(etcd_server.endpoints)
        e.put(f"{etcd_prefix}/reshard", json.dumps({"from": 16, "to": 32, "state": "draining"}).encode())
        e.close()
        shown = shardcron("shards", *etcd_args)
        assert "RESHARD IN PROGRESS: 16 -> 32" in shown.stdout
        assert shardcron("reshard", "--abort", *etcd_args, "--db", db).returncode == 0
        c.wait_balanced({"n0", "n1"}, 90)

        for target in (64, 8):
            out = shardcron("reshard", "--shards", str(target), *etcd_args, "--db", db)
            assert out.returncode == 0, out.stdout + out.stderr
            assert f"the cluster has {target} shards" in out.stdout
            c.shards = target
            leaders = c.wait_balanced({"n0", "n1"}, 90)
            assert len(leaders) == target
            m = json.loads(shardcron("shards", *etcd_args, "--json").stdout)
            assert m["shard_count"] == target and m["reshard"] is None
            assert sum(r["jobs"] or 0 for r in m["shards"]) == 60, "every job lives on exactly one new shard"

        end_ms = int(time.time() * 1000) - 2000
        wait_until(lambda: audit(db, started_ms, end_ms)["clean"], 60, 2.0, "a clean audit across both reshards")
        report = audit(db, started_ms, end_ms)
        assert report["slots_checked"] >= 60 * ((end_ms - started_ms) // 1000 - 1)
