"""Calendars on a real two-node cluster (real etcd, real SQLite): a job every second follows an excluded
range defined around now, then a change made live through the other node, without a restart; the
audit is clean and counts the excluded slots; the API, the CLI and job files refuse bad calendars and
unknown names, and a calendar a job names is deleted only by force."""

from __future__ import annotations

import json
import uuid

import grpc
import pytest

from shardcron import Client
from shardcron.audit import run_audit
from shardcron.client.errors import ApiError
from shardcron.clock import wall_ms
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import TickStatus
from shardcron.sharding import shard_for
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from shardcron.store import make_engine
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.support.clusters import sqlite_cluster
from tests.support.commands import node_command
from tests.support.tenancy import admitted

pytestmark = pytest.mark.cluster

SHARDS = 2


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    with sqlite_cluster(etcd_server, tmp_path_factory, "calendars", SHARDS, ["a", "b"]) as (c, nodes, url):
        yield c, nodes, url


def _excluding(name: str, start_ms: int, end_ms: int):
    return parse_calendar(name, {"exclude_ranges": [{"from": start_ms, "to": end_ms}]})


def test_a_job_runs_only_where_its_calendar_allows_and_follows_a_live_change(cluster):
    c, nodes, url = cluster
    jid = f"cal-{uuid.uuid4().hex[:6]}"
    name = f"quiet-{uuid.uuid4().hex[:6]}"
    leader = c.leaders()[shard_for(jid, SHARDS)]
    other = next(n for n in nodes if n.node_id != leader)  # every calendar write goes through the other node
    t0 = (wall_ms() // 1000 + 6) * 1000
    first = (t0, t0 + 3000)  # three slots excluded from the start
    with Client(other.address) as oc, Client(nodes[0].address) as c0:
        oc.put_calendar(_excluding(name, *first))
        # The node that will schedule it knows the calendar through the watch: the job is admitted there too.
        job = job_from_dict({"id": jid, "every": "1s", "calendars": [name], "executor": {"kind": "noop"}})
        wait_until(lambda: admitted(c0, job), 20, 0.2, what="the job admitted with its calendar")
        wait_until(lambda: _slots_through(c0, jid, first[1] + 2000), 30, 0.3, what="slots past the first range")
        # A live change, made through the node that does not schedule the job: a new range from 3 s on.
        t1 = (wall_ms() // 1000 + 3) * 1000
        second = (t1, t1 + 3000)
        stored = oc.put_calendar(_excluding(name, *second))
        assert stored.version == 2
        wait_until(lambda: _slots_through(c0, jid, second[1] + 2000), 30, 0.3, what="slots past the second range")
        _, runs = c0.get_job_runs(jid)
        assert runs.next_reason is None  # nothing excluded ahead any more
        ticks = [t for t in c0.list_ticks(jid, limit=200) if not t.manual]
    ran = {t.scheduled_at_ms: t for t in ticks if t.status is not TickStatus.SKIPPED}
    for lo, hi in (first, second):
        assert not [s for s in ran if lo <= s < hi], (lo, hi, sorted(ran))  # never run where excluded
    # The first range was known before the job existed: its slots were never even claimed.
    assert not [t for t in ticks if first[0] <= t.scheduled_at_ms < first[1]], ticks
    slots = sorted(t.scheduled_at_ms for t in ticks)
    assert len(slots) == len(set(slots))
    allowed = [
        s for s in range(slots[0], slots[-1] + 1, 1000) if not (first[0] <= s < first[1] or second[0] <= s < second[1])
    ]
    assert set(allowed) <= set(ran), sorted(set(allowed) - set(ran))  # every allowed slot ran
    engine = make_engine(url)
    try:
        report = run_audit(engine, from_ms=slots[0] - 1, to_ms=slots[-1], job_id=jid, now_ms=slots[-1] + 10_000)
    finally:
        engine.dispose()
    assert report.clean(), report.to_dict()
    assert report.per_job[jid].calendar_excluded == 6, report.to_dict()
    assert report.per_job[jid].slots_checked == len(allowed)


def _slots_through(client: Client, jid: str, until_ms: int) -> bool:
    return any(t.scheduled_at_ms >= until_ms and t.status.is_final for t in client.list_ticks(jid, limit=5))


def test_jobs_get_says_why_the_next_slot_is_later(cluster):
    _, nodes, _ = cluster
    name = f"away-{uuid.uuid4().hex[:6]}"
    jid = f"cal-next-{uuid.uuid4().hex[:6]}"
    now = wall_ms()
    until = (now // 3_600_000 + 48) * 3_600_000  # two days ahead, on the hour
    with Client(nodes[0].address) as c:
        c.put_calendar(_excluding(name, now - 1000, until))
        job = job_from_dict({"id": jid, "every": "1h", "calendars": [name], "executor": {"kind": "noop"}})
        wait_until(lambda: admitted(c, job), 20, 0.2, what="the job admitted")
        _, runs = c.get_job_runs(jid)
    assert runs.next_slot_ms == until, runs
    assert name in runs.next_reason and "excluded range" in runs.next_reason, runs.next_reason
    out = node_command(nodes[1], "jobs", "get", jid)
    assert out.returncode == 0, out.stderr
    assert "next: slots from" in out.stdout and name in out.stdout, out.stdout


def test_calendars_cli_put_get_list_and_delete(cluster, tmp_path):
    _, nodes, _ = cluster
    name = f"biz-{uuid.uuid4().hex[:6]}"
    f = tmp_path / "cal.toml"
    f.write_text(
        f'[calendars.{name}]\ntimezone = "Europe/Lisbon"\nexclude_dates = [2026-12-25]\n'
        'windows = { mon-fri = "09:00-18:00" }\n'
    )
    out = node_command(nodes[0], "calendars", "put", str(f))
    assert out.returncode == 0 and f"calendar {name} version 1" in out.stdout, out.stderr
    out = node_command(nodes[1], "calendars", "get", name, "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["timezone"] == "Europe/Lisbon" and got["exclude_dates"] == ["2026-12-25"] and got["version"] == 1
    assert [w["days"] for w in got["windows"]] == ["mon", "tue", "wed", "thu", "fri"] and got["jobs"] == []
    out = node_command(nodes[1], "calendars", "list")
    assert out.returncode == 0 and name in out.stdout and "Europe/Lisbon" in out.stdout, out.stdout
    ics = tmp_path / "holidays.ics"
    ics.write_text(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\n"
        "SUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261226\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    out = node_command(nodes[0], "calendars", "put", str(ics), "--name", f"{name}-ics", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["exclude_dates"] == ["2026-12-25"]

    jid = f"cal-user-{uuid.uuid4().hex[:6]}"
    wait_until(
        lambda: (
            node_command(
                nodes[1], "jobs", "put", jid, "--every", "1h", "--noop", "--paused", "--calendar", name
            ).returncode
            == 0
        ),
        20,
        0.3,
        what="the job put on node b",
    )
    out = node_command(nodes[0], "calendars", "delete", name)
    assert out.returncode == 1, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardcron: error: "), out.stderr
    assert jid in lines[0] and "--force" in lines[0], lines[0]
    assert json.loads(node_command(nodes[0], "calendars", "get", name, "--json").stdout)["jobs"] == [jid]
    out = node_command(nodes[0], "calendars", "delete", name, "--force")
    assert out.returncode == 0 and f"calendar {name} deleted" in out.stdout, out.stderr
    out = node_command(nodes[0], "calendars", "get", name)
    assert out.returncode == 1 and "not found" in out.stderr, out.stderr
    out = node_command(nodes[0], "jobs", "get", jid, "--json")  # owes nothing until the calendar is put again
    runs = json.loads(out.stdout)["runs"]
    assert runs["next_slot_ms"] is None and "does not exist" in runs["next_reason"], runs


@pytest.mark.parametrize(
    "body, says",
    [
        ('timezone = "Mars/Olympus"', "timezone: unknown timezone 'Mars/Olympus'"),
        ('windows = { mon-fri = "9-18" }', "windows.mon-fri.start: expected a wall-clock time HH:MM"),
        ('exclude_dates = ["2026-13-01"]', "exclude_dates[0]: expected a date as YYYY-MM-DD"),
        ("holidays = []", "holidays: unknown key"),
    ],
)
def test_calendars_put_refuses_a_bad_file_naming_the_field(cluster, tmp_path, body, says):
    _, nodes, _ = cluster
    f = tmp_path / "bad.toml"
    f.write_text(f"[calendars.bad]\n{body}\n")
    out = node_command(nodes[0], "calendars", "put", str(f))
    assert out.returncode == 1, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardcron: error: "), out.stderr
    assert str(f) in lines[0] and says in lines[0], lines[0]


def test_the_api_refuses_bad_calendars_and_unknown_names_naming_the_field(cluster):
    _, nodes, _ = cluster
    with grpc.insecure_channel(nodes[0].address) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        bad = pb.Calendar(name="bad", windows=[pb.CalendarWindow(days="mon", start="10:00", end="10:00")])
        with pytest.raises(grpc.RpcError) as e:
            stub.PutCalendar(pb.PutCalendarRequest(calendar=bad), timeout=10)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "calendar.windows" in e.value.details() and "is empty" in e.value.details(), e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.GetCalendar(pb.GetCalendarRequest(name="no/such"), timeout=10)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "name" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.DeleteCalendar(pb.DeleteCalendarRequest(name="never-was"), timeout=10)
        assert e.value.code() is grpc.StatusCode.NOT_FOUND, e.value.details()
        job = pb.Job(
            id="cal-unknown", schedule=pb.Schedule(interval_ms=60_000), noop=pb.NoopExecutor(), calendars=["never-was"]
        )
        with pytest.raises(grpc.RpcError) as e:
            stub.PutJob(pb.PutJobRequest(job=job), timeout=10)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "calendars[0]" in e.value.details() and "'never-was'" in e.value.details(), e.value.details()
    with Client(nodes[1].address) as c:
        c.put_calendar(_excluding("cas", 0, 1000))
        with pytest.raises(ApiError) as e:
            c.put_calendar(_excluding("cas", 0, 2000), expected_version=0)
        assert e.value.code is grpc.StatusCode.ABORTED and "expected version 0" in str(e.value)


def test_a_change_through_the_jobs_own_leader_reschedules_a_far_next_slot(cluster):
    # The job's next allowed slot is an hour away; the leader itself is told the calendar now allows
    # every slot: the job runs within seconds, not in an hour.
    c, nodes, _ = cluster
    jid = f"cal-far-{uuid.uuid4().hex[:6]}"
    name = f"far-{uuid.uuid4().hex[:6]}"
    leader = next(n for n in nodes if n.node_id == c.leaders()[shard_for(jid, SHARDS)])
    with Client(leader.address) as lc:
        now = wall_ms()
        lc.put_calendar(_excluding(name, now - 1000, now + 3_600_000))
        lc.put_job(job_from_dict({"id": jid, "every": "1s", "calendars": [name], "executor": {"kind": "noop"}}))
        lc.put_calendar(parse_calendar(name, {}))
        wait_until(lambda: [t for t in lc.list_ticks(jid) if t.status.is_final], 20, 0.3, what="a run")


def test_jobs_apply_puts_a_files_calendars_before_its_jobs(cluster, tmp_path):
    _, nodes, _ = cluster
    name, jid = f"file-{uuid.uuid4().hex[:6]}", f"cal-file-{uuid.uuid4().hex[:6]}"
    f = tmp_path / "jobs.yaml"
    f.write_text(
        f"calendars:\n  {name}:\n    timezone: America/New_York\n    windows: {{'sat,sun': '10:00-12:00'}}\n"
        f"jobs:\n  - id: {jid}\n    every: 1h\n    calendars: [{name}]\n    executor: {{kind: noop}}\n"
    )
    out = node_command(nodes[1], "jobs", "apply", "-f", str(f))
    assert out.returncode == 0, out.stderr
    assert f"calendar {name} version 1" in out.stdout and jid in out.stdout, out.stdout
    with Client(nodes[0].address) as c:
        job, runs = c.get_job_runs(jid)
    assert job.calendars == (name,) and runs.next_slot_ms is not None
    assert (runs.next_slot_ms // 3_600_000) % 24 in (14, 15, 16, 17)  # 10:00 or 11:00 in New York, in UTC


def test_a_nodes_jobs_file_imports_its_calendars(cluster, tmp_path):
    # Last in this module: a third node joins (its jobs are imported only where it comes to lead,
    # which the balancer decides; its file's calendars are written at its start, before any shard).
    c, nodes, _ = cluster
    name, jid = f"boot-{uuid.uuid4().hex[:6]}", f"cal-boot-{uuid.uuid4().hex[:6]}"
    f = tmp_path / "jobs.toml"
    f.write_text(
        f'[calendars.{name}]\ntimezone = "Europe/Lisbon"\nexclude_dates = [2026-12-25]\n\n'
        f'[[jobs]]\nid = "{jid}"\nevery = "1h"\ncalendars = ["{name}"]\nexecutor = {{ kind = "noop" }}\n'
    )
    third = c.add("c", extra_args=["--jobs", str(f)])
    try:
        with Client(nodes[0].address) as client:
            stored, _ = wait_until(lambda: _calendar_or_none(client, name), 30, 0.3, what="the file's calendar")
        assert stored.version == 1 and stored.calendar == parse_calendar(
            name, {"timezone": "Europe/Lisbon", "exclude_dates": ["2026-12-25"]}
        )
    finally:
        third.terminate()
    assert "Traceback" not in third.log_text(), third.log_text()[-4000:]


def _calendar_or_none(client: Client, name: str):
    from shardcron.client.errors import NotFound

    try:
        return client.get_calendar(name)
    except NotFound:
        return None
