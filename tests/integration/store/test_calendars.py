"""Calendars in the store, on every database: versions, compare-and-set, the history the audit reads,
deletes refused while a job names the calendar, and a job file's calendars imported once."""

from __future__ import annotations

import pytest

from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from shardcron.store import calendars as cs
from shardcron.store import ensure_schema, ensure_shards, put_job, raise_fence

HOLIDAYS = parse_calendar(
    "holidays", {"timezone": "Europe/Lisbon", "exclude_dates": ["2026-12-25"], "windows": {"mon-fri": "09:00-18:00"}}
)
MORE = parse_calendar("holidays", {"timezone": "Europe/Lisbon", "exclude_dates": ["2026-12-25", "2027-01-01"]})


@pytest.fixture
def engine(store_engine):
    ensure_schema(store_engine, auto_upgrade=True)
    return store_engine


def test_put_get_list_versions_and_history(engine):
    first = cs.put_calendar(engine, HOLIDAYS, node_id="n1", now_ms=1000)
    assert (first.version, first.updated_at_ms) == (1, 1000)
    got = cs.get_calendar(engine, "holidays")
    assert got.calendar == HOLIDAYS and got.version == 1
    with pytest.raises(cs.CalendarVersionConflict) as e:
        cs.put_calendar(engine, MORE, node_id="n1", now_ms=2000, expected_version=0)
    assert "calendar 'holidays': expected version 0, found 1" in str(e.value)
    assert cs.put_calendar(engine, MORE, node_id="n2", now_ms=2000, expected_version=1).version == 2
    cs.put_calendar(engine, parse_calendar("a-first", {}), node_id="n1", now_ms=2500)
    assert [(s.calendar.name, s.version) for s in cs.list_calendars(engine)] == [("a-first", 1), ("holidays", 2)]
    cs.delete_calendar(engine, "holidays", now_ms=3000)
    with pytest.raises(cs.CalendarNotFound):
        cs.get_calendar(engine, "holidays")
    with pytest.raises(cs.CalendarNotFound):
        cs.delete_calendar(engine, "holidays", now_ms=3500)
    # Re-created: the versions go on counting, so (name, version) names one definition forever.
    assert cs.put_calendar(engine, HOLIDAYS, node_id="n1", now_ms=4000).version == 4
    history = cs.calendar_history(engine, ["holidays"])
    assert [(v.version, v.effective_at_ms, v.calendar) for v in history] == [
        (1, 1000, HOLIDAYS),
        (2, 2000, MORE),
        (3, 3000, None),
        (4, 4000, HOLIDAYS),
    ]
    assert cs.calendar_history(engine, []) == []


def test_a_calendar_a_job_names_is_deleted_only_by_force(engine):
    ensure_shards(engine, 1)
    raise_fence(engine, 0, 5, "n1", 1)
    cs.put_calendar(engine, HOLIDAYS, node_id="n1", now_ms=1000)
    for jid, cals in (
        ("b-user", ["holidays"]),
        ("a-user", ["other", "holidays"]),
        ("no-cal", []),
        ("near-miss", ["holidays-2"]),
    ):
        put_job(
            engine,
            job_from_dict({"id": jid, "every": "1h", "calendars": cals}),
            shard=0,
            fence=5,
            node_id="n1",
            now_ms=1000,
        )
    assert cs.jobs_using(engine, "holidays") == ["a-user", "b-user"]
    with pytest.raises(cs.CalendarInUse) as e:
        cs.delete_calendar(engine, "holidays", now_ms=2000)
    assert "used by 2 job(s): a-user, b-user" in str(e.value) and "--force" in str(e.value)
    assert cs.get_calendar(engine, "holidays").version == 1  # nothing was written
    cs.delete_calendar(engine, "holidays", now_ms=2000, force=True)
    assert cs.list_calendars(engine) == []


def test_a_job_files_calendars_are_imported_once(engine):
    assert cs.import_calendars(engine, [HOLIDAYS], node_id="n1", now_ms=1000) == ["holidays"]
    assert cs.import_calendars(engine, [HOLIDAYS], node_id="n2", now_ms=2000) == []  # unchanged: no new version
    assert cs.import_calendars(engine, [MORE], node_id="n2", now_ms=3000) == ["holidays"]
    assert cs.get_calendar(engine, "holidays").version == 2


def test_concurrent_writes_each_get_a_version_or_a_conflict(engine):
    from concurrent.futures import ThreadPoolExecutor

    def put(i: int):
        cal = parse_calendar("busy", {"exclude_dates": [f"2026-12-{i + 1:02d}"]})
        try:
            return cs.put_calendar(engine, cal, node_id=f"n{i}", now_ms=1000 + i).version
        except cs.CalendarVersionConflict as e:
            return str(e)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(put, range(8)))
    versions = sorted(a for a in answers if isinstance(a, int))
    conflicts = [a for a in answers if isinstance(a, str)]
    assert all("created by another call at the same moment" in c for c in conflicts), conflicts
    assert versions == list(range(1, len(versions) + 1)) and versions  # no version given twice, none lost
    history = cs.calendar_history(engine, ["busy"])
    assert [v.version for v in history] == versions
    assert cs.get_calendar(engine, "busy").calendar == history[-1].calendar
