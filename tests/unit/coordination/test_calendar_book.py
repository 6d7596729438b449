"""The pure parts that wire calendars in: the stored form, the node's book, the versions the audit
judges by, the missing rule with calendars, a job's calendar names, job files, and next_reason."""

from __future__ import annotations

import pytest

from shardcron.coordination.calendar_book import CalendarBook, Unknown
from shardcron.errors import InvalidJob
from shardcron.rules.audit import find_missing
from shardcron.rules.calendar_history import CHANGE_GRACE_MS, History, Verdict, Version
from shardcron.rules.runs import job_runs
from shardcron.spec.calendar_tables import calendar_to_dict, describe_windows, parse_calendar
from shardcron.spec.job import job_from_dict, job_from_json, job_to_json
from shardcron.spec.jobfile import JobFileError, load_file_calendars, load_job_file
from tests.support.instants import ms

OFFICE = {
    "timezone": "Europe/Lisbon",
    "windows": {"mon-fri": "09:00-18:00", "fri": "22:00-02:00"},
    "exclude_dates": ["2026-12-25"],
    "exclude_ranges": [{"from": "2026-12-04T10:00:00Z", "to": "2026-12-04T11:00:00+00:00"}],
}
ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Boxing Day\r\n"
    "DTSTART;VALUE=DATE:20261226\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


@pytest.mark.parametrize(
    "body",
    [
        OFFICE,
        {},
        {"timezone": "America/New_York", "windows": [{"days": "*", "start": "00:00", "end": "24:00"}]},
        {"ics": ICS, "exclude_dates": ["2026-12-25"]},
        {"windows": {"sun": "23:00-01:00"}},  # crosses the week's end
    ],
)
def test_the_stored_form_reads_back_to_an_equal_calendar(body):
    cal = parse_calendar("c", body)
    d = calendar_to_dict(cal)
    assert parse_calendar("c", d) == cal
    assert "ics" not in d  # the events are dates and ranges now


def test_the_stored_form_is_plain_and_canonical():
    d = calendar_to_dict(parse_calendar("c", OFFICE))
    assert d == {
        "timezone": "Europe/Lisbon",
        "exclude_dates": ["2026-12-25"],
        "windows": [{"days": day, "start": "09:00", "end": "18:00"} for day in ("mon", "tue", "wed", "thu", "fri")]
        + [{"days": "fri", "start": "22:00", "end": "24:00"}, {"days": "sat", "start": "00:00", "end": "02:00"}],
        "exclude_ranges": [{"from": ms("2026-12-04T10:00Z"), "to": ms("2026-12-04T11:00Z")}],
    }


def test_the_book_reports_what_changed_and_resolves_names():
    a, b = parse_calendar("a", {}), parse_calendar("b", OFFICE)
    book = CalendarBook([a])
    assert book.replace([a, b]) == {"b"}
    assert book.replace([a, b]) == set()
    b2 = parse_calendar("b", {**OFFICE, "exclude_dates": ["2026-12-24"]})
    assert book.replace([a, b2]) == {"b"}
    assert book.resolve(["b", "a"]) == (b2, a)
    assert book.resolve(["a", "gone"]) == Unknown("gone")
    assert book.replace([b2]) == {"a"}
    assert "does not exist" in book.allows(["a"], 0)
    assert book.allows(["b"], ms("2026-12-24T12:00Z")).startswith("holiday 2026-12-24")
    assert book.allows(["b"], ms("2026-12-23T12:00Z")) is None
    assert book.put(a) is True and book.put(a) is False
    assert book.names() == {"a", "b"}
    assert book.remove("a") is True and book.remove("a") is False and book.names() == {"b"}


def _range(name: str, lo: str, hi: str):
    return parse_calendar(name, {"exclude_ranges": [{"from": f"{lo}Z", "to": f"{hi}Z"}]})


T0 = ms("2026-12-04T10:00Z")
HISTORY = History(
    {
        "q": [
            Version(T0, _range("q", "2026-12-04T10:01", "2026-12-04T10:02")),
            Version(T0 + 600_000, _range("q", "2026-12-04T10:10:02", "2026-12-04T10:11")),  # changed at 10:10:00
            Version(T0 + 1_200_000, None),
        ],  # deleted at 10:20
        "open": [Version(T0, parse_calendar("open", {}))],
    }
)


@pytest.mark.parametrize(
    "names, at, verdict",
    [
        ((), "2026-12-04T10:01:30", Verdict.OWED),  # no calendar: every slot owed
        (("q",), "2026-12-04T10:00:30", Verdict.OWED),
        (("q",), "2026-12-04T10:01:30", Verdict.EXCLUDED),  # version 1's range
        (("q",), "2026-12-04T09:01:30", Verdict.OWED),  # before the first version: judged by it
        (("q",), "2026-12-04T10:10:01", Verdict.OWED),  # just after the change, both versions allow it
        (("q",), "2026-12-04T10:10:03", Verdict.EITHER),  # within the grace, the versions disagree
        (("q",), "2026-12-04T10:10:30", Verdict.EXCLUDED),  # past the grace: version 2 alone
        (("q",), "2026-12-04T10:01:30.000", Verdict.EXCLUDED),
        (("q",), "2026-12-04T10:20:01", Verdict.EITHER),  # deleted 1 s before: the old version allowed it
        (("q",), "2026-12-04T10:30:00", Verdict.EXCLUDED),  # deleted: nothing owed
        (("open", "q"), "2026-12-04T10:10:30", Verdict.EXCLUDED),  # every calendar must allow it
        (("open",), "2026-12-04T10:10:30", Verdict.OWED),
        (("never",), "2026-12-04T10:10:30", Verdict.EXCLUDED),  # no history at all: nothing owed
    ],
)
def test_a_slot_is_judged_by_the_versions_in_force_then(names, at, verdict):
    assert CHANGE_GRACE_MS == 5_000
    assert HISTORY.judge(names, ms(f"{at}Z")) is verdict


def test_the_missing_rule_skips_excluded_slots_and_accepts_either_way_after_a_change():
    job = job_from_dict({"id": "j", "every": "1s", "calendars": ["q"], "catchup_window": "1h"})
    lo, hi = ms("2026-12-04T10:09:59Z"), ms("2026-12-04T10:11:01Z")
    slots = range(lo + 1000, hi + 1, 1000)
    excluded = range(ms("2026-12-04T10:10:02Z"), ms("2026-12-04T10:11:00Z"), 1000)
    either_with_row = ms("2026-12-04T10:10:03Z")  # a leader that had not heard of the change yet ran it
    present = {s: s - 1000 for s in slots if s not in excluded or s == either_with_row}
    judge = lambda s: HISTORY.judge(("q",), s)  # noqa: E731
    result = find_missing(job, present, lo, hi, now_ms=hi + 60_000, judge=judge)
    assert result.missing == () and result.excused == ()
    assert result.calendar_excluded == len(excluded) - 1
    assert result.slots_checked == len(slots) - len(excluded) + 1
    # Without the row, a slot the new version allows after the grace is missing.
    del present[ms("2026-12-04T10:11:00Z")]
    assert find_missing(job, present, lo, hi, now_ms=hi + 60_000, judge=judge).missing == (ms("2026-12-04T10:11:00Z"),)


@pytest.mark.parametrize(
    "raw, field, says",
    [
        ("business", "calendars", "must be a list of calendar names"),
        (["ok", "no/slash"], "calendars[1]", "must be 1-128 letters"),
        ([""], "calendars[0]", "must be 1-128 letters"),
        ([7], "calendars[0]", "must be 1-128 letters"),
    ],
)
def test_a_job_refuses_bad_calendar_names_naming_the_field(raw, field, says):
    with pytest.raises(InvalidJob) as e:
        job_from_dict({"id": "j", "every": "1m", "calendars": raw})
    assert e.value.field == field and says in str(e.value), str(e.value)


def test_a_jobs_calendars_survive_its_stored_json_and_a_job_without_keeps_its_json():
    job = job_from_dict({"id": "j", "every": "1m", "calendars": ["b", "a", "b"]})
    assert job.calendars == ("b", "a")  # in the job's order, once each
    assert job_from_json(job_to_json(job)).calendars == ("b", "a")
    assert "calendars" not in job_to_json(job_from_dict({"id": "j", "every": "1m"}))


def test_a_job_file_defines_calendars_beside_its_jobs(tmp_path):
    f = tmp_path / "jobs.toml"
    f.write_text(
        '[calendars.business]\ntimezone = "Europe/Lisbon"\nwindows = { mon-fri = "09:00-18:00" }\n\n'
        '[[jobs]]\nid = "report"\nevery = "1h"\ncalendars = ["business"]\nexecutor = { kind = "noop" }\n'
    )
    assert [j.calendars for j in load_job_file(str(f))] == [("business",)]
    [cal] = load_file_calendars(str(f))
    assert cal == parse_calendar("business", {"timezone": "Europe/Lisbon", "windows": {"mon-fri": "09:00-18:00"}})
    f.write_text(
        '[calendars.business]\nwindows = { mon-fri = "09:00-09:00" }\n[[jobs]]\nid = "r"\nevery = "1h"\n'
        'executor = { kind = "noop" }\n'
    )
    with pytest.raises(JobFileError) as e:
        load_file_calendars(str(f))
    assert str(f) in str(e.value) and "calendars.business: windows.mon-fri: 09:00-09:00 is empty" in str(e.value)


def test_next_reason_says_which_calendar_excluded_what():
    job = job_from_dict({"id": "j", "every": "1h", "calendars": ["xmas"]})
    xmas = parse_calendar("xmas", {"exclude_dates": ["2026-12-25"]})
    runs = job_runs(job, ms("2026-12-24T23:30Z"), calendars=(xmas,))
    assert runs.next_slot_ms == ms("2026-12-26T00:00Z")
    assert runs.next_reason == "slots from 2026-12-25T00:00:00.000Z excluded: holiday 2026-12-25 (calendar 'xmas')"
    assert job_runs(job, ms("2026-12-23T23:30Z"), calendars=(xmas,)).next_reason is None


@pytest.mark.parametrize(
    "windows, text",
    [
        (None, "-"),
        ({"mon-fri": "09:00-18:00"}, "Mon-Fri 09:00-18:00"),
        ({"mon,wed,thu": "09:00-12:00", "sat": "10:00-12:00"}, "Mon,Wed-Thu 09:00-12:00, Sat 10:00-12:00"),
        ({"fri": "22:00-02:00"}, "Fri 22:00-24:00, Sat 00:00-02:00"),
    ],
)
def test_windows_are_described_as_a_person_writes_them(windows, text):
    cal = parse_calendar("c", {} if windows is None else {"windows": windows})
    assert describe_windows(cal.windows) == text
