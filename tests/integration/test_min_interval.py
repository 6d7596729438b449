"""--min-interval on real nodes: a job file below it stops the node at start, naming the file, the job and
the minimum; a node run with a lower minimum accepts (and runs) what the default refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import func, select

from shardcron import Client
from shardcron.api.client import InvalidRequest
from shardcron.dev.testing.cluster import wait_until
from shardcron.jobspec import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.schema import ticks

pytestmark = pytest.mark.cluster


def node_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcron", "node", "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("schedule, minimum, said", [
    ('every = "1ms"', "1s", "schedule.every: every 1ms: shorter than this cluster's minimum interval of 1s"),
    ('cron = "* * * * * *"', "2s",
     "schedule.cron: '* * * * * *' has slots 1s apart: shorter than this cluster's minimum interval of 2s"),
    ('cron = "*/5 * * * *"', "10m",
     "schedule.cron: '*/5 * * * *' has slots 5m apart: shorter than this cluster's minimum interval of 10m"),
])
def test_a_job_file_below_the_minimum_stops_the_node_naming_file_job_and_minimum(
        tmp_path, etcd_server, etcd_prefix, schedule, minimum, said):
    path = tmp_path / "jobs.toml"
    path.write_text(f'[[jobs]]\nid = "e2"\n{schedule}\nexecutor = {{ kind = "noop" }}\n')
    out = node_cli("--etcd", etcd_server.endpoints, "--prefix", etcd_prefix, "--db", f"sqlite:///{tmp_path}/x.db",
                   "--jobs", str(path), "--min-interval", minimum)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line == (f"shardcron: error: {path}: job 'e2': {said}; to allow it, run the nodes with a lower "
                    "--min-interval (SHARDCRON_MIN_INTERVAL)")


def test_a_bad_min_interval_is_refused_naming_the_flag(tmp_path, etcd_server):
    out = node_cli("--etcd", etcd_server.endpoints, "--db", f"sqlite:///{tmp_path}/x.db", "--min-interval", "fast")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == \
        "shardcron: error: --min-interval: expected a duration such as 1s, 500ms or 1m (0: no minimum), got 'fast'"


def test_a_lower_minimum_admits_sub_second_jobs_from_the_file_and_the_api(make_cluster, tmp_path):
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[jobs]]\nid = "fast-file"\nevery = "250ms"\nexecutor = { kind = "noop" }\n')
    db = f"sqlite:///{tmp_path}/store.db"
    c = make_cluster(db, shards=2, extra_args=["--jobs", str(jobs)])
    n = c.add("n0", env={"SHARDCRON_MIN_INTERVAL": "200ms"})  # the variable works as the flag does
    c.wait_all_led(60)
    with Client(n.address) as client:
        assert client.put_job(job_from_dict({"id": "fast-api", "every": "200ms", "executor": {"kind": "noop"},
                                             "paused": True})).version == 1
        with pytest.raises(InvalidRequest, match="every 100ms: shorter than this cluster's minimum interval of 200ms"):
            client.put_job(job_from_dict({"id": "too-fast", "every": "100ms", "executor": {"kind": "noop"}}))
        results = client.put_jobs([job_from_dict({"id": "b-ok", "every": "200ms", "paused": True}),
                                   job_from_dict({"id": "b-bad", "every": "199ms"})])
        assert [r.ok for r in results] == [True, False] and "minimum interval of 200ms" in results[1].message
    engine = make_engine(db)
    try:
        def succeeded() -> int:
            with engine.connect() as conn:
                return conn.execute(select(func.count()).select_from(ticks).where(
                    ticks.c.job_id == "fast-file", ticks.c.status == "succeeded")).scalar()

        wait_until(lambda: succeeded() >= 8, 60, 0.2, what="the 250ms job from the file to run")
    finally:
        engine.dispose()
