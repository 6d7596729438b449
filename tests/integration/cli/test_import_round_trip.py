"""A crontab and CronJobs imported (``shardcron import``), applied to a real node (``jobs apply``) and backfilled
over a past day and a half: each job's ticks fall on exactly the slots croniter gives the source's own
expression in the source's zone."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.model import TickStatus
from shardcron.spec.jobfile import load_job_file
from shardcron.store import make_engine
from tests.support.clusters import stopped_after
from tests.support.tick_rows import rows_in_range

pytestmark = pytest.mark.cluster

NEW_YORK = ZoneInfo("America/New_York")
# A past window clear of any clock change: the importers' unit tests hold the clock changes to croniter.
FROM = datetime(2026, 11, 10, 0, 0, tzinfo=NEW_YORK)
TO = datetime(2026, 11, 11, 12, 0, tzinfo=NEW_YORK)
WINDOW_MS = (int(FROM.timestamp() * 1000), int(TO.timestamp() * 1000))

CRONTAB = """\
MAILTO=ops@example.com
CRON_TZ=America/New_York
*/7 * * * *          echo seven
15,45 9-17 * * mon-fri  echo office hours
0 */2 * * *          echo every other hour
@hourly              echo hourly
30 1 * * *           echo nightly
"""
# The expressions as the crontab wrote them, by the command each job runs.
SOURCE = {
    "echo seven": "*/7 * * * *",
    "echo office hours": "15,45 9-17 * * mon-fri",
    "echo every other hour": "0 */2 * * *",
    "echo hourly": "@hourly",
    "echo nightly": "30 1 * * *",
    "true": "5 4 * * *",
}
CRONJOB = """\
apiVersion: batch/v1
kind: CronJob
metadata: {name: cleanup, namespace: ops}
spec:
  schedule: "5 4 * * *"
  timeZone: America/New_York
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: c, image: busybox, command: ["true"]}]
          restartPolicy: Never
"""


@pytest.fixture(scope="module")
def node(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("import-node")
    url = f"sqlite:///{d}/store.db"
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", 2, 4, str(d), extra_args=["--allow-shell"])
    n = c.add("n0")
    with stopped_after(c):
        c.wait_all_led(60)
        yield n, url


def shardcron(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "shardcron", *args], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return out


def croniter_slots_ms(expression: str) -> list[int]:
    it = croniter(expression, FROM, ret_type=datetime)
    slots = [FROM] if croniter.match(expression, FROM) else []
    while (at := it.get_next(datetime)) < TO:
        slots.append(at)
    return [int(at.timestamp() * 1000) for at in slots]


def test_imported_jobs_tick_on_the_sources_slots(node, tmp_path):
    n, url = node
    (tmp_path / "crontab").write_text(CRONTAB)
    (tmp_path / "cronjobs.yaml").write_text(CRONJOB)
    shardcron("import", "crontab", str(tmp_path / "crontab"), "-o", str(tmp_path / "cron.toml"))
    shardcron(
        "import", "k8s-cronjob", str(tmp_path / "cronjobs.yaml"), "--as", "shell", "-o", str(tmp_path / "k8s.toml")
    )

    jobs = {}
    for name in ("cron.toml", "k8s.toml"):
        path = str(tmp_path / name)
        jobs.update({job.id: job.executor.shell.command for job in load_job_file(path)})
        shardcron("jobs", "apply", "-f", path, "--server", n.address)
    assert sorted(jobs.values()) == sorted(SOURCE)

    window = [str(ms) for ms in WINDOW_MS]
    for job_id in jobs:  # every slot started, as cron starts each one whatever still runs
        shardcron(
            "jobs", "backfill", job_id, "--from", window[0], "--to", window[1], "--rate", "500/s", "--overlap", "allow", "--wait",
            "--server", n.address,
        )  # fmt: skip

    engine = make_engine(url)
    try:
        for job_id, command in jobs.items():
            expected = croniter_slots_ms(SOURCE[command])
            rows = wait_until(
                lambda: (
                    (r := rows_in_range(engine, job_id, *WINDOW_MS))
                    and all(TickStatus(x.status).is_final for x in r)
                    and r
                ),
                60,
                0.2,
                what=f"{job_id}'s backfilled slots to finish",
            )
            assert [r.scheduled_at_ms for r in rows] == expected, f"{job_id} ({SOURCE[command]})"
            assert {TickStatus(r.status) for r in rows} == {TickStatus.SUCCEEDED}
    finally:
        engine.dispose()
