"""APScheduler job stores as python jobs: stores written by APScheduler itself, slots checked against each
trigger's own ``get_next_fire_time``, and every refusal named."""

from __future__ import annotations

import itertools
import sqlite3
import textwrap
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.combining import AndTrigger, OrTrigger
from apscheduler.triggers.cron import CronTrigger

from shardcron.importers.apscheduler_store import STOP_NOTE, import_apscheduler
from shardcron.importers.apscheduler_triggers import DST_NOTE
from shardcron.importers.translate import SourceUnreadable
from shardcron.rules.triggers import trigger_for
from shardcron.spec.job import job_from_dict

LISBON = ZoneInfo("Europe/Lisbon")
NOW = datetime(2026, 12, 7, tzinfo=UTC)  # what the importer takes as the present
_names = itertools.count()


@pytest.fixture
def tasks_module(tmp_path, monkeypatch):
    """A module of task functions on sys.path (a new name per test: imports are cached); gives its name."""
    name = f"aps_tasks_{next(_names)}"
    (tmp_path / f"{name}.py").write_text("def report(*args, **kwargs):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def store(tmp_path):
    """Adds jobs through a paused APScheduler scheduler on a SQLite file; gives the file's URL once shut down."""
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"

    def write(*jobs: dict, table: str = "apscheduler_jobs") -> str:
        scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=url, tablename=table)}, timezone=LISBON
        )
        scheduler.start(paused=True)
        try:
            for job in jobs:
                pause = job.pop("paused", False)
                added = scheduler.add_job(**job)
                if pause:
                    added.pause()
        finally:
            scheduler.shutdown(wait=False)
        return url

    return write


def one(url: str, **kwargs):
    result = import_apscheduler(url, now=NOW, **kwargs)
    assert result.refused == [], result.refused
    [imported] = result.jobs
    return imported


# A cron trigger as add_job takes it, and the cron expression it must become.
CRONS = [
    ({"minute": "*/15", "hour": "9-17", "day_of_week": "mon-fri"}, "0,15,30,45 9-17 * * 1-5"),
    ({"hour": 2}, "0 2 * * *"),
    ({"minute": 30, "hour": 1}, "30 1 * * *"),
    ({"minute": "*/20", "hour": "0-2"}, "0,20,40 0-2 * * *"),
    ({"day_of_week": "sun", "hour": 7, "minute": 0}, "0 7 * * 0"),
    ({"day_of_week": "sat,sun", "hour": 7}, "0 7 * * 0,6"),
    ({"day_of_week": "0-2", "hour": 7}, "0 7 * * 1-3"),
    ({"day": "1,15", "hour": 0}, "0 0 1,15 * *"),
    ({"day": "*/10", "hour": 0}, "0 0 1,11,21,31 * *"),
    ({"month": "jan-mar", "day": 1}, "0 0 1 1-3 *"),
    ({"month": "*/4", "day": 2}, "0 0 2 1,5,9 *"),
    ({"second": "*/10"}, "0,10,20,30,40,50 * * * * *"),
    ({"second": 30, "minute": "*/5"}, "30 0,5,10,15,20,25,30,35,40,45,50,55 * * * *"),
    ({"year": "*", "week": "*", "minute": 5}, "5 * * * *"),
]


@pytest.mark.parametrize("fields, expected", CRONS)
def test_every_cron_form_becomes_the_expression_with_its_values(store, tasks_module, fields, expected):
    url = store({"func": f"{tasks_module}:report", "trigger": "cron", "id": "report", **fields})
    imported = one(url)
    assert imported.job["cron"] == expected
    assert imported.job["timezone"] == "Europe/Lisbon"
    assert imported.job["executor"] == {"kind": "python", "target": f"{tasks_module}:report"}
    assert DST_NOTE in imported.notes  # Lisbon moves its clocks


# Windows of slots compared: an ordinary week, and Lisbon's clocks going back (25 Oct 2026: 01:00-01:59 twice).
WINDOWS = [datetime(2026, 6, 1, tzinfo=LISBON), datetime(2026, 10, 24, 23, 0, tzinfo=LISBON)]


def apscheduler_slots(trigger, start: datetime, count: int, *, once_per_wall_time: bool = False) -> list[int]:
    """The trigger's own next fire times after ``start``, as epoch ms. ``once_per_wall_time``: a cron's run in
    the repeated hour of a fall-back counted once (shardcron runs it once, at the first: the DST note says so)."""
    seen_wall, slots, previous = set(), [], None
    while len(slots) < count:
        previous = trigger.get_next_fire_time(previous, previous or start + timedelta(microseconds=1))
        wall = wall_time(round(previous.timestamp() * 1000))
        if not (once_per_wall_time and wall in seen_wall):
            seen_wall.add(wall)
            slots.append(round(previous.timestamp() * 1000))
    return slots


def wall_time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, LISBON).replace(tzinfo=None)


def shardcron_slots(job: dict, start: datetime, count: int) -> list[int]:
    trigger = trigger_for(job_from_dict(job, require_executor=True).schedule)
    slot, slots = round(start.timestamp() * 1000), []
    for _ in range(count):
        slot = trigger.next_after(slot)
        slots.append(slot)
    return slots


@pytest.mark.parametrize("fields", [f for f, _ in CRONS if "month" not in f and "day" not in f])
@pytest.mark.parametrize("start", WINDOWS, ids=["june", "lisbon-clocks-go-back"])
def test_cron_slots_are_the_triggers_own(store, tasks_module, fields, start):
    url = store({"func": f"{tasks_module}:report", "trigger": "cron", "id": "r", **fields})
    job = one(url).job
    trigger = CronTrigger(timezone=LISBON, **fields)
    assert shardcron_slots(job, start, 50) == apscheduler_slots(trigger, start, 50, once_per_wall_time=True)


# Lisbon's summer and winter time of 2026-27, each without a clock change inside: see the next test for why.
SEASONS = [
    (datetime(2026, 4, 2, tzinfo=LISBON), datetime(2026, 10, 24, tzinfo=LISBON)),
    (datetime(2026, 10, 26, tzinfo=LISBON), datetime(2027, 3, 27, tzinfo=LISBON)),
]


@pytest.mark.parametrize("fields", [f for f, _ in CRONS if "month" in f or "day" in f])
@pytest.mark.parametrize("start, end", SEASONS, ids=["summer", "winter"])
def test_day_and_month_restricted_cron_slots_are_the_triggers_own(store, tasks_module, fields, start, end):
    job = one(store({"func": f"{tasks_module}:report", "trigger": "cron", "id": "r", **fields})).job
    end_ms = round(end.timestamp() * 1000)
    ours = [s for s in shardcron_slots(job, start, 60) if s < end_ms]
    theirs = [s for s in apscheduler_slots(CronTrigger(timezone=LISBON, **fields), start, 60) if s < end_ms]
    assert ours == theirs
    assert ours or "month" in fields  # only jan-mar has no slot in summer


def test_apscheduler_skips_a_first_of_the_month_after_the_clocks_go_forward_and_shardcron_does_not():
    """APScheduler 3.11's own quirk, which the DST note states: day=1 at 00:00 in Lisbon, from 2 March 2026,
    comes next on 1 May; 1 April exists, and shardcron runs it."""
    start = datetime(2026, 3, 2, tzinfo=LISBON)
    theirs = CronTrigger(day=1, hour=0, timezone=LISBON).get_next_fire_time(None, start)
    job = {"id": "r", "cron": "0 0 1 * *", "timezone": "Europe/Lisbon", "executor": {"kind": "noop"}}
    assert theirs.date().isoformat() == "2026-05-01"
    assert wall_time(shardcron_slots(job, start, 1)[0]) == datetime(2026, 4, 1)


def test_the_spring_difference_the_dst_note_states():
    """01:30 on 29 Mar 2026 does not exist in Lisbon: APScheduler runs it at 02:30, shardcron at 02:00."""
    start = datetime(2026, 3, 29, 0, 0, tzinfo=LISBON)
    aps = CronTrigger(minute=30, hour=1, timezone=LISBON).get_next_fire_time(None, start)
    ours = shardcron_slots(
        {"id": "r", "cron": "30 1 * * *", "timezone": "Europe/Lisbon", "executor": {"kind": "noop"}}, start, 1
    )[0]
    assert wall_time(round(aps.timestamp() * 1000)) == datetime(2026, 3, 29, 2, 30)
    assert wall_time(ours) == datetime(2026, 3, 29, 2, 0)


# Interval triggers: add_job's fields, the job's every, and a word a note must hold (None: no note).
INTERVALS = [
    ({"minutes": 5, "start_date": datetime(2026, 1, 1, tzinfo=UTC)}, "5m", None),
    ({"hours": 1, "start_date": datetime(2026, 1, 1, 0, 0, tzinfo=LISBON)}, "1h", None),
    ({"seconds": 90, "start_date": datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)}, "1m30s", "7s earlier in each period"),
    ({"days": 1, "start_date": datetime(2027, 1, 1, tzinfo=UTC)}, "1d", "starts it at 2027-01-01"),
]


@pytest.mark.parametrize("fields, every, note", INTERVALS)
def test_intervals_become_every_and_keep_their_slots_when_aligned(store, tasks_module, fields, every, note):
    url = store({"func": f"{tasks_module}:report", "trigger": "interval", "id": "poll", **fields})
    imported = one(url)
    assert imported.job["every"] == every
    if note is None:
        assert imported.notes == ()
        from apscheduler.triggers.interval import IntervalTrigger

        trigger = IntervalTrigger(**fields)
        for start in WINDOWS:
            assert shardcron_slots(imported.job, start, 50) == apscheduler_slots(trigger, start, 50)
    else:
        assert any(note in n for n in imported.notes), imported.notes


def test_a_date_trigger_becomes_a_single_run(store, tasks_module):
    when = datetime(2027, 3, 1, 9, 30, tzinfo=LISBON)
    imported = one(store({"func": f"{tasks_module}:report", "trigger": "date", "run_date": when, "id": "once"}))
    job = job_from_dict(imported.job, require_executor=True)
    assert job.schedule.at_ms == round(when.timestamp() * 1000)


# misfire_grace_time and coalesce as the job had them, and the catch-up they become.
MISSED = [
    ({"coalesce": True, "misfire_grace_time": 300}, "latest", "5m"),
    ({"coalesce": False, "misfire_grace_time": 300}, "all", "5m"),
    ({"coalesce": False, "misfire_grace_time": 1}, "all", "1s"),
    ({"coalesce": True, "misfire_grace_time": None}, "latest", "3650d"),
]


@pytest.mark.parametrize("settings, catchup, window", MISSED)
def test_misfire_and_coalesce_become_the_catch_up(store, tasks_module, settings, catchup, window):
    imported = one(store({"func": f"{tasks_module}:report", "trigger": "cron", "hour": 1, "id": "r", **settings}))
    assert (imported.job["catchup"], imported.job["catchup_window"]) == (catchup, window)


@pytest.mark.parametrize("max_instances, overlap", [(1, "skip"), (3, "allow")])
def test_max_instances_becomes_overlap(store, tasks_module, max_instances, overlap):
    job = {"func": f"{tasks_module}:report", "trigger": "cron", "hour": 1, "id": "r", "max_instances": max_instances}
    assert one(store(job)).job["overlap"] == overlap


def test_a_paused_job_is_imported_paused_with_its_arguments(store, tasks_module):
    job = {"func": f"{tasks_module}:report", "trigger": "cron", "hour": 1, "id": "r", "paused": True}
    imported = one(store({**job, "args": (2026, "eu"), "kwargs": {"dry_run": True}}))
    assert imported.job["paused"] is True
    assert imported.job["executor"]["args"] == [2026, "eu"]
    assert imported.job["executor"]["kwargs"] == {"dry_run": True}


# Jobs shardcron cannot express: add_job's fields, and words the refusal must hold.
REFUSED = [
    ({"trigger": OrTrigger([CronTrigger(hour=1), CronTrigger(hour=2)])}, "OrTrigger"),
    ({"trigger": AndTrigger([CronTrigger(hour=1), CronTrigger(hour="1-2")])}, "AndTrigger"),
    ({"trigger": "cron", "day": "last"}, "day=last"),
    ({"trigger": "cron", "day": "2nd fri"}, "day=2nd fri"),
    ({"trigger": "cron", "day": 1, "day_of_week": "mon"}, "both match"),
    ({"trigger": "cron", "year": 2027}, "year=2027"),
    ({"trigger": "cron", "week": "*/2"}, "week=*/2"),
    ({"trigger": "cron", "hour": 1, "end_date": datetime(2030, 1, 1, tzinfo=UTC)}, "do not end"),
    ({"trigger": "interval", "hours": 1, "end_date": datetime(2030, 1, 1, tzinfo=UTC)}, "do not end"),
    ({"trigger": "cron", "hour": 1, "args": [datetime(2026, 1, 1)]}, "args[0] is a datetime"),
    ({"trigger": "cron", "minute": "*", "jitter": 120}, "jitter"),
]


@pytest.mark.parametrize("fields, reason", REFUSED)
def test_a_job_shardcron_cannot_express_is_refused_by_id(store, tasks_module, fields, reason):
    url = store(
        {"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "fine"},
        {"func": f"{tasks_module}:report", "id": "odd", **fields},
    )
    result = import_apscheduler(url, now=NOW)
    assert [j.job["id"] for j in result.jobs] == ["fine"]
    [refused] = result.refused
    assert refused.source == "apscheduler_jobs job 'odd'"
    assert reason in refused.reason, refused.reason


def test_a_jitter_shorter_than_the_gap_is_kept_with_a_note(store, tasks_module):
    imported = one(store({"func": f"{tasks_module}:report", "trigger": "cron", "hour": 1, "jitter": 30, "id": "r"}))
    assert imported.job["jitter"] == "30s"
    assert any("random" in n for n in imported.notes)


def test_a_job_whose_callable_is_gone_is_refused_naming_it_and_the_store_is_left_alone(
    store, tmp_path, monkeypatch, tasks_module
):
    gone = f"aps_gone_{next(_names)}"
    (tmp_path / f"{gone}.py").write_text("def run():\n    pass\n")
    url = store(
        {"func": f"{gone}:run", "trigger": "cron", "hour": 4, "id": "orphan"},
        {"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "fine"},
    )
    (tmp_path / f"{gone}.py").unlink()
    monkeypatch.delitem(__import__("sys").modules, gone)
    result = import_apscheduler(url, now=NOW)
    [refused] = result.refused
    assert refused.source == "apscheduler_jobs job 'orphan'"
    assert f"'{gone}:run'" in refused.reason and "does not restore" in refused.reason
    assert [j.job["id"] for j in result.jobs] == ["fine"]
    rows = sqlite3.connect(url.removeprefix("sqlite:///")).execute("select count(*) from apscheduler_jobs")
    assert rows.fetchone()[0] == 2  # APScheduler's get_all_jobs would have deleted the orphan


def test_the_file_notes_say_to_stop_apscheduler_and_allow_each_module(store, tasks_module):
    url = store({"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "a"})
    notes = import_apscheduler(url, now=NOW).notes
    assert STOP_NOTE in notes
    assert any(f"--allow-python {tasks_module}" in n for n in notes)


def test_another_table_name_is_read(store, tasks_module):
    url = store({"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "a"}, table="sched")
    assert one(url, table="sched").job["id"] == "a"


def test_job_ids_are_readable_and_unique(store, tasks_module):
    url = store(
        {"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "Nightly Report"},
        {"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "nightly_report"},
    )
    assert sorted(j.job["id"] for j in import_apscheduler(url, now=NOW).jobs) == ["nightly-report", "nightly-report-2"]


# A store that cannot be read, and words the error must hold.
UNREADABLE = [
    ("sqlite:///{tmp}/missing.sqlite", {}, "no such file"),
    ("not a url", {}, "is not a SQLAlchemy URL"),
    ("nosuchdialect://x/y", {}, "this machine can open"),
    ("sqlite:///{tmp}/jobs.sqlite", {"table": "other"}, "no table 'other'"),
    ("sqlite:///{tmp}/garbage.sqlite", {}, "cannot read"),
]


@pytest.mark.parametrize("url, kwargs, words", UNREADABLE)
def test_a_store_that_cannot_be_read_is_a_clear_error(store, tasks_module, tmp_path, url, kwargs, words):
    store({"func": f"{tasks_module}:report", "trigger": "cron", "hour": 3, "id": "a"})
    (tmp_path / "garbage.sqlite").write_text(textwrap.dedent("this is not a database " * 100))
    with pytest.raises(SourceUnreadable) as raised:
        import_apscheduler(url.format(tmp=tmp_path), now=NOW, **kwargs)
    assert words in str(raised.value)
    assert not (tmp_path / "missing.sqlite").exists()
