"""The metrics endpoint of a real node, scraped during a run."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from tests.integration.node.test_cluster import write_jobs

pytestmark = pytest.mark.cluster


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_a_running_node_exposes_lateness_histogram_and_health_gauges(etcd_server, etcd_prefix, tmp_path):
    port = free_port()
    jobs = write_jobs(tmp_path / "jobs.toml", [{"id": "m", "every": "1s", "executor": {"kind": "noop"}}])
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        etcd_prefix,
        2,
        4,
        str(tmp_path),
        extra_args=["--jobs", jobs, "--metrics-listen", f"127.0.0.1:{port}"],
    )
    try:
        c.add("n0")
        c.wait_all_led(60)

        def lateness_counted():
            m = scrape(port)
            counts = [v for (name, _), v in m.items() if name == "shardcron_tick_lateness_seconds_count"]
            return m if counts and sum(counts) >= 3 else None

        m = wait_until(lateness_counted, 60, 0.5, "the lateness histogram to count ticks")
        assert m[("shardcron_session_alive", ())] == 1
        assert m[("shardcron_shards_led", ())] == 2
        assert m[("shardcron_ticks_total", (("namespace", "default"), ("status", "succeeded")))] >= 1
        assert ("shardcron_lease_renewal_age_seconds", ()) in m
        assert m[("shardcron_oldest_overdue_slot_seconds", ())] < 5
        assert any(name == "shardcron_etcd_call_seconds_count" for name, _ in m)
        assert any(name == "shardcron_db_call_seconds_count" for name, _ in m)
        buckets = [
            v
            for (name, labels), v in m.items()
            if name == "shardcron_tick_lateness_seconds_bucket" and dict(labels)["le"] == "+Inf"
        ]
        assert sum(buckets) >= 3
    finally:
        c.stop_all()
