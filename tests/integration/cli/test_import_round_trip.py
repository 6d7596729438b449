"""Each importer's output applied to a real node (``jobs apply``) and backfilled over a past day and a half:
every job's ticks fall on exactly the slots its source gives. A crontab and CronJobs against croniter reading
their expressions; a Celery app's ``beat_schedule`` against its ``crontab`` objects' own sets (a Redis broker
receives each message); an APScheduler store, written by APScheduler, against its triggers' own next fire times
(the node calls the stored function for each slot)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import redis
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from celery.schedules import crontab
from croniter import croniter

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.model import TickStatus
from shardcron.spec.jobfile import load_job_file
from shardcron.store import make_engine
from tests.support.beat_crontab import crontab_admits
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


# A module of the test's own (a name no other test imports), holding what the Python sources call: the
# function the APScheduler jobs run, and the Celery app whose beat_schedule is imported. The node imports it
# too: it calls the function for each slot.
TASKS = f"round_trip_{uuid.uuid4().hex[:8]}"
QUEUE = f"round-trip-{uuid.uuid4().hex[:8]}"
BROKER = "redis://127.0.0.1:6379/11"
APSCHEDULER = {
    "every-twenty": {"minute": "*/20", "hour": "9-17", "day_of_week": "mon-fri"},
    "twice-daily": {"minute": 5, "hour": "6,18"},
}
TASKS_SOURCE = f"""\
from celery import Celery
from celery.schedules import crontab

RUNS = []


def report(*args, **kwargs):
    RUNS.append((args, kwargs))


app = Celery("{TASKS}", broker="{BROKER}")
app.conf.timezone = "America/New_York"
app.conf.beat_schedule = {{
    "office-half-hours": {{
        "task": "reports.office",
        "schedule": crontab(minute="*/30", hour="8-18", day_of_week="mon-fri"),
        "options": {{"queue": "{QUEUE}"}},
    }},
    "night-run": {{"task": "reports.night", "schedule": crontab(minute=15, hour=3), "options": {{"queue": "{QUEUE}"}}}},
}}
"""


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("import-sources")
    (d / f"{TASKS}.py").write_text(TASKS_SOURCE)
    sys.path.insert(0, str(d))  # APScheduler, in this process, checks the function it stores
    yield d
    sys.path.remove(str(d))


@pytest.fixture(scope="module")
def node(etcd_server, tmp_path_factory, tasks_dir):
    d = tmp_path_factory.mktemp("import-node")
    url = f"sqlite:///{d}/store.db"
    c = Cluster(
        etcd_server.endpoints,
        url,
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(d),
        extra_args=["--allow-shell", "--allow-python", TASKS],
    )
    path = os.pathsep.join(p for p in (str(tasks_dir), os.environ.get("PYTHONPATH")) if p)
    n = c.add("n0", env={"PYTHONPATH": path})
    with stopped_after(c):
        c.wait_all_led(60)
        yield n, url


@pytest.fixture
def broker():
    client = redis.Redis.from_url(BROKER)
    yield client
    client.delete(QUEUE)
    client.close()


def shardcron(*args: str, cwd=None) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", *args], capture_output=True, text=True, timeout=180, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return out


def croniter_slots_ms(expression: str) -> list[int]:
    it = croniter(expression, FROM, ret_type=datetime)
    slots = [FROM] if croniter.match(expression, FROM) else []
    while (at := it.get_next(datetime)) < TO:
        slots.append(at)
    return [int(at.timestamp() * 1000) for at in slots]


def crontab_slots_ms(c: crontab) -> list[int]:
    """The minutes of the window whose local time beat's crontab admits."""
    slots, t = [], FROM
    while t < TO:
        if crontab_admits(c, t.astimezone(NEW_YORK)):
            slots.append(int(t.timestamp() * 1000))
        t += timedelta(minutes=1)
    return slots


def apscheduler_slots_ms(fields: dict) -> list[int]:
    """The trigger's own next fire times in the window."""
    trigger = CronTrigger(timezone=NEW_YORK, **fields)
    slots, previous = [], None
    at = trigger.get_next_fire_time(None, FROM)
    while at is not None and at < TO:
        slots.append(int(at.timestamp() * 1000))
        previous = at
        at = trigger.get_next_fire_time(previous, previous + timedelta(microseconds=1))
    return slots


def backfill_and_compare(n, url: str, expected: dict[str, list[int]]) -> None:
    """Backfill each job over the window, every slot started (as cron starts each one whatever still runs), and
    hold its finished ticks to ``expected``."""
    window = [str(ms) for ms in WINDOW_MS]
    for job_id in expected:
        shardcron(
            "jobs", "backfill", job_id, "--from", window[0], "--to", window[1], "--rate", "500/s", "--overlap", "allow", "--wait",
            "--server", n.address,
        )  # fmt: skip
    engine = make_engine(url)
    try:
        for job_id, slots in expected.items():
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
            assert [r.scheduled_at_ms for r in rows] == slots, job_id
            assert {TickStatus(r.status) for r in rows} == {TickStatus.SUCCEEDED}, job_id
    finally:
        engine.dispose()


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

    backfill_and_compare(n, url, {job_id: croniter_slots_ms(SOURCE[command]) for job_id, command in jobs.items()})


def test_a_celery_beat_schedule_imported_enqueues_on_its_crontabs_slots(node, tasks_dir, tmp_path, broker):
    n, url = node
    out = tmp_path / "beat.toml"
    shardcron("import", "celery-beat", f"{TASKS}:app", "-o", str(out), cwd=tasks_dir)
    jobs = {job.id: job for job in load_job_file(str(out))}
    beat = importlib.import_module(TASKS).app.conf.beat_schedule  # the crontabs the app built
    assert sorted(jobs) == sorted(beat)
    assert {(j.executor.celery.url, j.executor.celery.queue, j.schedule.timezone) for j in jobs.values()} == {
        (BROKER, QUEUE, "America/New_York")
    }
    shardcron("jobs", "apply", "-f", str(out), "--server", n.address)

    expected = {job_id: crontab_slots_ms(beat[job_id]["schedule"]) for job_id in jobs}
    backfill_and_compare(n, url, expected)
    assert broker.llen(QUEUE) == sum(len(slots) for slots in expected.values())  # one message a slot


def test_an_apscheduler_store_imported_runs_its_function_on_its_triggers_slots(node, tasks_dir, tmp_path):
    n, url = node
    store = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    scheduler = BackgroundScheduler(jobstores={"default": {"type": "sqlalchemy", "url": store}}, timezone=NEW_YORK)
    scheduler.start(paused=True)
    try:
        for job_id, fields in APSCHEDULER.items():
            scheduler.add_job(f"{TASKS}:report", "cron", id=job_id, args=[job_id], **fields)
    finally:
        scheduler.shutdown(wait=False)

    out = tmp_path / "aps.toml"
    shardcron("import", "apscheduler", store, "-o", str(out), cwd=tasks_dir)
    jobs = {job.id: job for job in load_job_file(str(out))}
    assert sorted(jobs) == sorted(APSCHEDULER)
    assert {j.executor.kind.value for j in jobs.values()} == {"python"}
    shardcron("jobs", "apply", "-f", str(out), "--server", n.address)
    backfill_and_compare(n, url, {job_id: apscheduler_slots_ms(APSCHEDULER[job_id]) for job_id in jobs})
