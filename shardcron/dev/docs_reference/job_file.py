"""docs/reference/job-file.md: every key a job file takes, with its type, default and an example.

What is read from the spec itself:
- the keys: ``spec.job.JOB_KEYS``, ``spec.schedule.SCHEDULE_KEYS``, ``spec.job.RETRY_KEYS`` and
  ``spec.calendar_tables.CALENDAR_KEYS``. A key the spec takes that ``KEYS`` below does not describe,
  or one ``KEYS`` describes that the spec no longer takes, stops the generator naming it;
- the defaults: a job of only the required keys, parsed and written back by ``job_to_dict``;
- the choices of ``catchup`` and ``overlap``: their enums;
- every example: parsed into a job (or a calendar) by the spec, so an example the spec refuses stops
  the generator, and written as TOML that reads back to the same value.

What is written here: a key's type and what it means, and its example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardcron.dev.docs_reference.markdown import code, table
from shardcron.dev.docs_reference.toml_values import line, shown_default
from shardcron.model import CatchUp, Overlap
from shardcron.spec.calendar_tables import CALENDAR_KEYS, parse_calendar
from shardcron.spec.job import JOB_KEYS, RETRY_KEYS, job_from_dict, job_to_dict
from shardcron.spec.schedule import SCHEDULE_KEYS

HERE = "shardcron/dev/docs_reference/job_file.py"


@dataclass(frozen=True)
class Key:
    type: str
    meaning: str
    example: Any
    absent: str = "none"  # what leaving the key out means, when the parsed job does not show a default


def _choices(enum: Any) -> str:
    return " | ".join(f'"{m.value}"' for m in enum)


# The job-level and schedule keys, in the order the page lists them.
KEYS: dict[str, Key] = {
    "id": Key("string", "the job's id: 1-256 bytes of printable UTF-8, unique in its namespace", "nightly-report"),
    "namespace": Key("string", "the namespace the job belongs to", "finance", absent="`default`"),
    "executor": Key(
        "table",
        "what runs at each slot: a `kind` and that kind's keys (see [Executors](executors.md)); required",
        {"kind": "http", "url": "https://reports.internal/run", "method": "POST"},
    ),
    "cron": Key("string", "cron expression: 5 fields, or 6 with seconds first", "0 2 * * *"),
    "every": Key("duration", "a fixed interval: slots at whole multiples of it since the epoch", "30s"),
    "interval_ms": Key("whole number", "`every` in milliseconds", 30000),
    "at": Key(
        "time",
        "a single run, at an ISO 8601 time (read in `timezone` when it has no offset)",
        "2030-01-01T09:00:00+01:00",
    ),
    "at_ms": Key("whole number", "`at` in milliseconds since the Unix epoch", 1893484800000),
    "timezone": Key("string", "the IANA zone the schedule is read in", "Europe/Lisbon"),
    "tz": Key("string", "`timezone`, shorter", "Europe/Lisbon"),
    "schedule": Key(
        "table",
        "the schedule's keys (`cron`, `every`, `at`, `timezone`, ...) in a table of their own, "
        "instead of at the job's top level; not both",
        {"cron": "0 9 * * 1-5", "timezone": "Europe/Lisbon"},
        absent="the schedule's keys at the job's top level",
    ),
    "catchup": Key(_choices(CatchUp), "missed slots, on a takeover: run all, only the latest, or none", "latest"),
    "catchup_window": Key("duration", "how far back missed slots are owed", "6h"),
    "overlap": Key(_choices(Overlap), "a slot due while the previous run still goes: skip it, or allow both", "allow"),
    "timeout": Key("duration", "how long one attempt may run", "10m"),
    "retry": Key(
        "table",
        "retries of a failed slot: `max_attempts`, `backoff`, `backoff_max`",
        {"max_attempts": 3},
        absent="one attempt",
    ),
    "retry.max_attempts": Key("whole number", "attempts per slot, the first included", 3),
    "retry.backoff": Key("duration", "the wait before the first retry; it doubles with each", "30s"),
    "retry.backoff_max": Key("duration", "the longest wait between retries", "5m"),
    "jitter": Key(
        "duration",
        "start each slot a fixed offset in [0, jitter) after it, the same on every leader; shorter than the "
        "gap between slots (see [Jitter](../how-to/jitter.md))",
        "2m",
        absent="`0s`",
    ),
    "calendars": Key(
        "list of strings",
        "stored calendars whose excluded slots the job skips (see [Calendars](../how-to/calendars.md))",
        ["office"],
    ),
    "history_limit": Key(
        "whole number",
        "keep only the job's newest ticks (see [Retention](../how-to/retention.md))",
        1000,
        absent="every tick is kept",
    ),
    "on_failure": Key(
        "table",
        "an executor run once per failed slot, after its retries (see [Failure notifications](../how-to/notifications.md))",
        {"kind": "http", "url": "https://hooks.example/shardcron"},
        absent="the node's `--notify-on-failure`",
    ),
    "on_recovery": Key(
        "table",
        "an executor run once when the job succeeds after failing",
        {"kind": "http", "url": "https://hooks.example/shardcron"},
        absent="the node's `--notify-on-recovery`",
    ),
    "start_deadline": Key(
        "duration",
        "the tick must start within this long of its slot, or its miss is recorded and alerted once "
        "(see [Deadlines](../how-to/deadlines.md)); longer than `jitter`",
        "2m",
        absent="none",
    ),
    "deadline": Key(
        "duration",
        "the slot must succeed within this long of it (and be acked, with a `heartbeat`)",
        "30m",
        absent="none",
    ),
    "heartbeat": Key(
        "duration",
        "the slot must be acked (`shardcron jobs ack JOB SLOT`) within this long of it",
        "1h",
        absent="none",
    ),
    "on_deadline": Key(
        "table",
        "an executor run once per missed deadline of a slot",
        {"kind": "http", "url": "https://hooks.example/late"},
        absent="where `on_failure` goes",
    ),
    "paused": Key("boolean", "create the job paused", True),
    "labels": Key(
        "table of string = string", "labels to find and group jobs by (`jobs list --label`)", {"team": "finance"}
    ),
    "version": Key("whole number", "the stored version; the store sets it, a job file leaves it out", 0),
    "calendars.NAME.timezone": Key(
        "string", "the IANA zone the calendar's dates and windows are read in", "Europe/Lisbon"
    ),
    "calendars.NAME.exclude_dates": Key("list of dates", "whole days on which no slot runs", ["2026-12-25"]),
    "calendars.NAME.windows": Key(
        "table or list", "the only times slots run, per day of the week", {"mon-fri": "09:00-18:00"}
    ),
    "calendars.NAME.exclude_ranges": Key(
        "list of tables",
        "ranges of time, each `from` and `to` with a UTC offset, in which no slot runs",
        [{"from": "2026-11-24T10:00:00+00:00", "to": "2026-11-24T12:00:00+00:00"}],
    ),
    "calendars.NAME.ics": Key(
        "string",
        "iCalendar text: its all-day events exclude their dates, its timed events their range",
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nSUMMARY:Christmas\nEND:VEVENT\nEND:VCALENDAR\n",
    ),
}

# The smallest job a file may give: the base each example is tried on, and whose parsed form shows the defaults.
BASE: dict[str, Any] = {"id": "example", "every": "1h", "executor": {"kind": "noop"}}
CALENDAR = "calendars.NAME."


class DriftError(Exception):
    """The spec and ``KEYS`` disagree: a key without an entry, or an entry for a key that is gone."""


def spec_keys() -> list[str]:
    """Every key the spec takes, as this page names it."""
    return sorted(
        [*JOB_KEYS, *SCHEDULE_KEYS] + [f"retry.{k}" for k in RETRY_KEYS] + [CALENDAR + k for k in CALENDAR_KEYS]
    )


def check_entries() -> None:
    taken = set(spec_keys())
    missing = sorted(taken - set(KEYS))
    gone = sorted(set(KEYS) - taken)
    if missing or gone:
        said = [f"the spec takes {k!r}, which has no entry in KEYS" for k in missing]
        said += [f"KEYS describes {k!r}, which the spec no longer takes" for k in gone]
        raise DriftError(f"{HERE}: " + "; ".join(said) + ": describe or drop it there, then run make docs-reference")


def _try(path: str, example: Any) -> None:
    """Parse ``path = example`` as the spec does; DriftError naming the key when the spec refuses it."""
    try:
        if path.startswith(CALENDAR):
            parse_calendar("office", {path.removeprefix(CALENDAR): example})
            return
        job = {k: v for k, v in BASE.items() if not (path in SCHEDULE_KEYS | {"schedule"} and k == "every")}
        if path in ("timezone", "tz"):
            job["every"] = BASE["every"]
        if path.startswith("retry."):
            job["retry"] = {path.removeprefix("retry."): example}
        else:
            job[path] = example
        job_from_dict(job, require_executor=True)
    except Exception as e:  # noqa: BLE001 - whatever the spec raises, the page must not show the example
        raise DriftError(f"{HERE}: the example of {path!r} ({example!r}) is refused by the spec: {e}") from e


def defaults() -> dict[str, Any]:
    """What the spec fills in for each key a job leaves out, by this page's names."""
    d = job_to_dict(job_from_dict(BASE, require_executor=True))
    out = {k: v for k, v in d.items() if k not in ("id", "schedule", "executor", "retry", "namespace")}
    out |= {f"retry.{k}": v for k, v in d["retry"].items()}
    out["timezone"] = out["tz"] = d["schedule"]["timezone"]
    return out


def calendar_defaults() -> dict[str, Any]:
    """What a calendar that gives no key holds: its zone (the other keys exclude nothing)."""
    return {CALENDAR + "timezone": parse_calendar("office", {}).timezone}


def render() -> str:
    check_entries()
    found = defaults() | calendar_defaults()
    rows: dict[bool, list[list[str]]] = {False: [], True: []}
    for path, key in KEYS.items():
        _try(path, key.example)
        calendar = path.startswith(CALENDAR)
        if path in ("id", "executor"):
            default = "required"
        elif path in ("cron", "every", "interval_ms", "at", "at_ms"):
            default = "one of `cron`, `every` or `at` is required"
        elif path in found:
            default = code(shown_default(found[path]))
        else:
            default = key.absent
        name = path.removeprefix(CALENDAR)
        rows[calendar].append([code(name), key.type, default, code(line(name, key.example)), key.meaning])
    headers = ["key", "type", "default", "example", "meaning"]
    return (
        "### The keys of a job (`[[jobs]]`)\n\n"
        + table(headers, rows[False])
        + "\n### The keys of a calendar (`[calendars.NAME]`)\n\n"
        + table(headers, rows[True])
    )


__all__ = ["KEYS", "DriftError", "check_entries", "defaults", "render", "spec_keys"]
