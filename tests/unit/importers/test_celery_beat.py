"""Celery beat schedules as celery jobs: real apps written as modules, their slots checked against the
crontab's own sets, and every refusal named."""

from __future__ import annotations

import itertools
import socket
import textwrap
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab
from croniter import croniter
from hypothesis import given
from hypothesis import strategies as st

from shardcron.importers.celery_beat import DEDUPE_NOTE, crontab_expression, import_celery_beat
from shardcron.importers.translate import SourceUnreadable
from shardcron.rules.triggers import trigger_for
from shardcron.spec.job import job_from_dict
from tests.support.beat_crontab import crontab_admits

_module_names = itertools.count()


@pytest.fixture
def write_module(tmp_path, monkeypatch):
    """Writes ``source`` as a new module on sys.path (a new name each time: imports are cached) and gives its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"beat_app_{next(_module_names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Reading an app's configuration must not contact its broker: any connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the importer opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def app_source(
    schedule: str, conf: str = 'timezone = "Europe/Lisbon"', broker: str | None = "redis://127.0.0.1:6379/0"
) -> str:
    return textwrap.dedent(f"""
        from datetime import datetime, timedelta, timezone
        from celery import Celery
        from celery.schedules import crontab, schedule, solar

        app = Celery("proj", broker={broker!r})
        app.conf.{conf}
        app.conf.beat_schedule = {schedule}
    """)


# The crontab as beat takes it, and the cron expression it must become.
CRONTABS = [
    ("crontab()", "* * * * *"),
    ("crontab(minute=0)", "0 * * * *"),
    ("crontab(minute=0, hour=0)", "0 0 * * *"),
    ("crontab(minute='*/15')", "0,15,30,45 * * * *"),
    ("crontab(minute='0,30', hour='9-17')", "0,30 9-17 * * *"),
    ("crontab(minute='1-30/7', hour='*/6')", "1,8,15,22,29 0,6,12,18 * * *"),
    ("crontab(minute={5, 10}, hour={1, 13})", "5,10 1,13 * * *"),
    ("crontab(minute=0, hour=7, day_of_week='mon-fri')", "0 7 * * 1-5"),
    ("crontab(minute=0, hour=7, day_of_week='sat,sun')", "0 7 * * 0,6"),
    ("crontab(minute=0, hour=7, day_of_week=0)", "0 7 * * 0"),
    ("crontab(minute=0, hour=7, day_of_week='sunday')", "0 7 * * 0"),
    ("crontab(minute=0, hour=7, day_of_week={1, 3, 5})", "0 7 * * 1,3,5"),
    ("crontab(minute=0, hour=0, day_of_month='1,15')", "0 0 1,15 * *"),
    ("crontab(minute=0, hour=0, day_of_month='10-20/5')", "0 0 10,15,20 * *"),
    ("crontab(minute=0, hour=0, day_of_month=1, month_of_year='*/3')", "0 0 1 1,4,7,10 *"),
    ("crontab(minute=0, hour=0, day_of_month=2, month_of_year='1-6')", "0 0 2 1-6 *"),
    ("crontab(minute=30, hour=1, month_of_year=10)", "30 1 * 10 *"),
]


@pytest.mark.parametrize("given, expected", CRONTABS)
def test_every_crontab_form_becomes_the_cron_expression_with_its_sets(write_module, given, expected):
    name = write_module(app_source(f"{{'nightly': {{'task': 'reports.nightly', 'schedule': {given}}}}}"))
    result = import_celery_beat(f"{name}:app")
    assert result.refused == []
    [imported] = result.jobs
    assert imported.job["cron"] == expected
    assert imported.job["timezone"] == "Europe/Lisbon"
    assert imported.job["executor"] == {"kind": "celery", "url": "redis://127.0.0.1:6379/0", "task": "reports.nightly"}
    assert imported.source == "beat_schedule['nightly']"


# Start of each window of slots compared: an ordinary week, and Lisbon's clocks going back (25 Oct 2026, 02:00
# WEST becomes 01:00 WET: 01:00-01:59 comes twice).
WINDOWS = [datetime(2026, 6, 1, 0, 0), datetime(2026, 10, 24, 22, 0)]


def crontab_wall_times(c: crontab, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` local wall-clock minutes after ``start`` that beat's crontab admits."""
    found, t = [], start
    while len(found) < count:
        t += timedelta(minutes=1)
        if crontab_admits(c, t):
            found.append(t)
    return found


def shardcron_wall_times(job: dict, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` slots of the job by shardcron's own trigger, as local wall-clock times."""
    zone = ZoneInfo(job["timezone"])
    trigger = trigger_for(job_from_dict(job, require_executor=True).schedule)
    slot = int(start.replace(tzinfo=zone).timestamp() * 1000)
    times = []
    for _ in range(count):
        slot = trigger.next_after(slot)
        times.append(datetime.fromtimestamp(slot / 1000, zone).replace(tzinfo=None))
    return times


@pytest.mark.parametrize("given", [g for g, _ in CRONTABS if "month_of_year" not in g])
@pytest.mark.parametrize("start", WINDOWS, ids=["june", "lisbon-clocks-go-back"])
def test_the_jobs_slots_are_the_crontabs_own(write_module, given, start):
    name = write_module(app_source(f"{{'job': {{'task': 't', 'schedule': {given}}}}}"))
    [imported] = import_celery_beat(f"{name}:app").jobs
    source = eval(given, {"crontab": crontab})  # the same crontab the app built
    assert shardcron_wall_times(imported.job, start, 50) == crontab_wall_times(source, start, 50)


def test_a_month_restricted_crontab_keeps_its_slots(write_module):
    given = "crontab(minute=0, hour=0, day_of_month=1, month_of_year='*/3')"
    name = write_module(app_source(f"{{'job': {{'task': 't', 'schedule': {given}}}}}"))
    [imported] = import_celery_beat(f"{name}:app").jobs
    start = datetime(2026, 1, 1)
    source = eval(given, {"crontab": crontab})
    assert shardcron_wall_times(imported.job, start, 12) == crontab_wall_times(source, start, 12)


# Each app's timezone settings and the zone its jobs get, with the note that goes with it if any.
ZONES = [
    ('timezone = "Europe/Lisbon"', "Europe/Lisbon", None),
    ('update(timezone="America/New_York", enable_utc=False)', "America/New_York", None),
    ("enable_utc = True", "UTC", None),
    ("enable_utc = False", "UTC", "local time"),
]


@pytest.mark.parametrize("conf, zone, note", ZONES)
def test_crontabs_are_read_in_the_zone_beat_used(write_module, conf, zone, note):
    name = write_module(app_source("{'j': {'task': 't', 'schedule': crontab(minute=0)}}", conf=conf))
    result = import_celery_beat(f"{name}:app")
    assert result.jobs[0].job["timezone"] == zone
    zone_notes = [n for n in result.notes if "timezone" in n]
    assert (note is None and not zone_notes) or (note and note in zone_notes[0])


# An interval as beat takes it, the job's every and its length, and a word of the note on alignment.
INTERVALS = [
    ("timedelta(minutes=5)", "5m", 300_000, "its own last run"),
    ("30", "30s", 30_000, "its own last run"),
    ("1.5", "1.5s", 1_500, "its own last run"),
    ("schedule(timedelta(hours=1))", "1h", 3_600_000, "its own last run"),
    ("schedule(timedelta(hours=1), relative=True)", "1h", 3_600_000, "relative=True"),
    ("timedelta(days=1, milliseconds=1)", "86400001ms", 86_400_001, "its own last run"),
]


@pytest.mark.parametrize("given, every, ms, note", INTERVALS)
def test_intervals_become_every_with_a_note_on_alignment(write_module, given, every, ms, note):
    name = write_module(app_source(f"{{'poll': {{'task': 'poll', 'schedule': {given}}}}}"))
    [imported] = import_celery_beat(f"{name}:app").jobs
    assert imported.job["every"] == every
    assert any(note in n and "1970-01-01" in n for n in imported.notes)
    assert job_from_dict(imported.job, require_executor=True).schedule.interval_ms == ms


# Entries shardcron cannot express, and a word their refusal must hold.
REFUSED = [
    ("{'task': 't', 'schedule': SOLAR}", "follows the sun"),
    ("{'task': 't', 'schedule': Custom(timedelta(seconds=5))}", "Custom"),
    ("{'task': 't', 'schedule': object()}", "builtins.object"),
    ("{'task': 't', 'schedule': 30, 'args': [object()]}", "args[0] is a object"),
    ("{'task': 't', 'schedule': 30, 'args': [float('nan')]}", "args[0] is nan"),
    ("{'task': 't', 'schedule': 30, 'kwargs': {1: 'x'}}", "key 1"),
    ("{'task': 't', 'schedule': 30, 'kwargs': {'when': datetime(2026, 1, 1)}}", "kwargs['when'] is a datetime"),
    ("{'task': 't', 'schedule': crontab(day_of_month=1, day_of_week='mon')}", "both match"),
    ("{'task': 't', 'schedule': crontab(minute=0, hour=0, day_of_month=30, month_of_year=2)}", "never fires"),
    ("{'task': 't', 'schedule': crontab(nowfun=datetime.now)}", "nowfun"),
    ("{'task': 't', 'schedule': 0}", "positive"),
    ("{'schedule': 30}", "names no task"),
    ("'every minute'", "must be a dict"),
    ("{'task': 't', 'schedule': 30, 'options': ['queue']}", "options must be a dict"),
]


@pytest.mark.parametrize("entry, reason", REFUSED)
def test_an_entry_shardcron_cannot_express_is_refused_by_name(write_module, entry, reason):
    schedule = f"{{'ok': {{'task': 'fine', 'schedule': 60}}, 'bad': {entry}}}"
    source = app_source("{}") + textwrap.dedent("""
        SOLAR = solar.__new__(solar)  # solar needs the ephem package to be built; beat reads these three
        SOLAR.event, SOLAR.lat, SOLAR.lon = "sunset", 38.7, -9.1

        class Custom(schedule):
            pass

        app.conf.beat_schedule = {schedule}
    """).replace("{schedule}", schedule)
    result = import_celery_beat(f"{write_module(source)}:app")
    assert [j.source for j in result.jobs] == ["beat_schedule['ok']"]
    [refused] = result.refused
    assert refused.source == "beat_schedule['bad']"
    assert reason in refused.reason


def test_a_broker_the_celery_executor_does_not_take_is_refused_with_shardcrons_reason(write_module):
    name = write_module(app_source("{'j': {'task': 't', 'schedule': 60}}", broker="sqs://"))
    [refused] = import_celery_beat(f"{name}:app").refused
    assert "executor.url" in refused.reason


# Options as an entry gives them (source text): the executor keys they become, and words the notes must hold.
OPTIONS = [
    ("{'queue': 'reports'}", {"queue": "reports"}, []),
    ("{'routing_key': 'r.daily', 'priority': 5}", {"routing_key": "r.daily", "priority": 5}, []),
    ("{'expires': 30}", {"expires": "30s"}, []),
    ("{'expires': 0.25}", {"expires": "250ms"}, []),
    ("{'expires': datetime(2030, 1, 1, tzinfo=timezone.utc)}", {}, ["expires=", "fixed time"]),
    ("{'exchange': 'ex', 'countdown': 5}", {}, ["countdown=5", "exchange='ex'"]),
]


@pytest.mark.parametrize("options, keys, notes", OPTIONS)
def test_options_become_executor_keys_or_notes(write_module, options, keys, notes):
    entry = f"{{'j': {{'task': 't', 'schedule': 60, 'args': (1, 'eu'), 'kwargs': {{'a': [1]}}, 'options': {options}}}}}"
    [imported] = import_celery_beat(f"{write_module(app_source(entry))}:app").jobs
    assert imported.job["executor"] == {
        "kind": "celery",
        "url": "redis://127.0.0.1:6379/0",
        "task": "t",
        "args": [1, "eu"],
        "kwargs": {"a": [1]},
        **keys,
    }
    for word in notes:
        assert any(word in n for n in imported.notes), (word, imported.notes)


def test_the_file_notes_name_the_real_guard_and_say_to_stop_beat(write_module):
    from shardcron.consumer import RedisDeduper, SqlDeduper, dedupe  # the names the note gives exist there

    assert callable(dedupe) and RedisDeduper and SqlDeduper
    name = write_module(app_source("{'j': {'task': 't', 'schedule': 60}}"))
    notes = import_celery_beat(f"{name}:app").notes
    assert DEDUPE_NOTE in notes
    assert "@dedupe(guard) from shardcron.consumer" in DEDUPE_NOTE and "celery beat" in DEDUPE_NOTE


def test_entry_names_give_readable_unique_ids(write_module):
    schedule = "{'Nightly Report': {'task': 't', 'schedule': 60}, 'nightly-report': {'task': 't', 'schedule': 60}}"
    name = write_module(app_source(schedule))
    assert [j.job["id"] for j in import_celery_beat(f"{name}:app").jobs] == ["nightly-report", "nightly-report-2"]


def test_an_app_without_a_broker_gets_celerys_default_and_a_note(write_module):
    name = write_module(app_source("{'j': {'task': 't', 'schedule': 60}}", broker=None))
    result = import_celery_beat(f"{name}:app")
    assert result.jobs[0].job["executor"]["url"].startswith("amqp://guest@localhost")
    assert any("names no broker_url" in n for n in result.notes)


def test_a_module_name_alone_finds_its_app(write_module):
    name = write_module(app_source("{'j': {'task': 't', 'schedule': crontab(minute=5)}}"))
    assert import_celery_beat(name).jobs[0].job["cron"] == "5 * * * *"


def test_a_django_settings_module_is_read_by_its_celery_names(write_module):
    name = write_module("""
        from celery.schedules import crontab
        CELERY_BROKER_URL = "redis://cache:6379/2"
        TIME_ZONE = "Europe/Paris"
        CELERY_BEAT_SCHEDULE = {"sync": {"task": "app.sync", "schedule": crontab(minute=0, hour="*/2")}}
    """)
    [imported] = import_celery_beat(name).jobs
    assert imported.job["cron"] == "0 0,2,4,6,8,10,12,14,16,18,20,22 * * *"
    assert imported.job["timezone"] == "Europe/Paris"
    assert imported.job["executor"]["url"] == "redis://cache:6379/2"


# A reference that does not lead to a schedule, and words the error must hold.
UNREADABLE = [
    ("no_such_module_here:app", "module 'no_such_module_here' does not import"),
    ("{raises}:app", "ZeroDivisionError"),
    ("{exits}:app", "SystemExit"),
    ("{app}:nope", "has no attribute 'nope'"),
    ("{app}:crontab", "not a Celery app"),
    ("{two}", "2 Celery apps"),
    ("{empty}", "no Celery app"),
    ("{app}:", "is not module:attribute"),
]


@pytest.mark.parametrize("ref, words", UNREADABLE)
def test_a_reference_that_leads_nowhere_is_a_clear_error(write_module, ref, words):
    names = {
        "raises": write_module("1 / 0"),
        "exits": write_module("raise SystemExit(3)"),
        "app": write_module(app_source("{}")),
        "two": write_module("from celery import Celery\na = Celery('a')\nb = Celery('b')"),
        "empty": write_module("x = 1"),
    }
    with pytest.raises(SourceUnreadable) as raised:
        import_celery_beat(ref.format(**names))
    assert words in str(raised.value)


@given(
    minutes=st.sets(st.integers(0, 59), min_size=1),
    hours=st.sets(st.integers(0, 23), min_size=1),
    weekdays=st.sets(st.integers(0, 6), min_size=1),
    months=st.sets(st.integers(1, 12), min_size=1),
)
def test_any_crontab_of_sets_reads_back_from_its_expression_as_the_same_sets(minutes, hours, weekdays, months):
    c = crontab(minute=minutes, hour=hours, day_of_week=weekdays, month_of_year=months)
    fields = croniter(crontab_expression(c)).expanded
    read = [
        _expanded(f, low, high)
        for f, (low, high) in zip(fields, [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)], strict=True)
    ]
    assert read == [c.minute, c.hour, set(range(1, 32)), c.month_of_year, c.day_of_week]


def _expanded(field: list, low: int, high: int) -> set[int]:
    """croniter's expanded field as a set (``*`` is every value; croniter writes Sunday as 0 or 7)."""
    return set(range(low, high + 1)) if field == ["*"] else {int(v) % 7 if high == 6 else int(v) for v in field}
