"""A node runs one event loop: its API, its dashboard (pages and metrics sampler) and its ticks share it.

A real node process with the dashboard on serves a page (the cluster's, read
through the node's own API) and runs an http tick (it fetches the dashboard's
script) and a python tick (it writes the node's thread names to
a file); its /metrics then counts one running event loop, and no thread of the
node is a loop or sampler of the API's or the dashboard's own.
"""

from __future__ import annotations

import json

import httpx
import pytest

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.model import TickStatus
from shardcron.store.engine import make_engine
from shardcron.store.tick_reads import list_ticks
from tests.integration.node.test_cluster import write_jobs
from tests.integration.node.test_metrics import scrape

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

LOOPS = ("shardcron_event_loops", ())
# The threads a node's API, dashboard and executors once ran their own loops or sampler in.
SECOND_LOOPS = {"api-loop", "dashboard", "dashboard-metrics", "shardcron-loop"}


def test_a_node_with_api_and_dashboard_runs_exactly_one_event_loop(etcd_server, etcd_prefix, tmp_path):
    http_port, metrics_port = free_port(), free_port()
    dashboard = f"http://127.0.0.1:{http_port}"
    names_file = tmp_path / "threads.json"
    jobs = write_jobs(
        tmp_path / "jobs.toml",
        [
            {
                "id": "page",
                "every": "1s",
                "executor": {"kind": "http", "url": dashboard + "/static/app.js", "method": "GET"},
            },
            {
                "id": "threads",
                "every": "1s",
                "executor": {
                    "kind": "python",
                    "target": "tests.support.pyjobs:thread_names",
                    "args": [str(names_file)],
                },
            },
        ],
    )
    db = f"sqlite:///{tmp_path}/s.db"
    c = Cluster(
        etcd_server.endpoints,
        db,
        etcd_prefix,
        2,
        4,
        str(tmp_path),
        extra_args=[
            "--jobs",
            jobs,
            "--allow-python",
            "tests.support.pyjobs",
            "--http-listen",
            f"127.0.0.1:{http_port}",
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
        ],
    )
    engine = make_engine(db)
    try:
        c.add("n0")
        c.wait_all_led(90)

        def page_served() -> bool:
            try:  # the first visit opens a session and is sent back to the page with its cookie
                with httpx.Client(base_url=dashboard, follow_redirects=True, timeout=10) as browser:
                    page = browser.get("/cluster")
                return page.status_code == 200 and "n0" in page.text
            except httpx.HTTPError:
                return False

        wait_until(page_served, 60, 0.2, "the dashboard to serve the cluster page")

        def succeeded(job_id: str) -> bool:
            return any(t.status is TickStatus.SUCCEEDED for t in list_ticks(engine, job_id, limit=20))

        wait_until(lambda: succeeded("page") and succeeded("threads"), 90, 0.2, "an http and a python tick to succeed")

        assert scrape(metrics_port)[LOOPS] == 1
        names = set(json.loads(names_file.read_text()))
        assert "node-loop" in names, sorted(names)
        assert not names & SECOND_LOOPS, sorted(names)
    finally:
        engine.dispose()
        c.stop_all()
