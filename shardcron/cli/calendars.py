"""``shardcron calendars put FILE | get NAME | list | delete NAME [--force]``: named calendars through the API.

FILE is one of:

* a TOML, YAML or JSON file with a ``calendars`` table (as in a job file), every
  calendar of which is put: ``[calendars.business]`` ``timezone = ...``;
* such a file holding one calendar at the top level, with its ``name``;
* an iCalendar file (``.ics``): its events become excluded dates and ranges of
  the calendar ``--name`` (default: the file's name without ``.ics``), read in
  ``--tz`` (for floating times; default UTC).

The file is checked here first, so a mistake names the file and the field
before anything is sent; the server checks again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardcron.cli.args import whole
from shardcron.cli.common import add_api_flags, api_client, fmt_ms, print_json, table
from shardcron.errors import ShardcronError
from shardcron.jobkey import display_key
from shardcron.spec.bounds import MAX_VERSION
from shardcron.spec.calendar import Calendar, CalendarError, StoredCalendar
from shardcron.spec.calendar_tables import calendar_to_dict, describe_windows, parse_calendar


class CalendarFileError(ShardcronError):
    pass


def read_calendar_file(path: str, name: str | None = None, tz: str | None = None) -> list[Calendar]:
    """The calendars FILE defines (see the module doc); every error names the file and the field."""
    from shardcron.spec.jobfile import (  # loaded by this command only (see cli/__init__.py)
        load_file_calendars,
        read_data_file,
        read_text_file,
    )

    p = Path(path)
    try:
        if p.suffix.lower() == ".ics":
            text = read_text_file(path)  # as a job file is read: bounded, UTF-8 only
            return [parse_calendar(name or p.stem, {"ics": text, "timezone": tz or "UTC"})]
        data = read_data_file(path)
        if isinstance(data, dict) and "calendars" in data:
            found = load_file_calendars(path, data)
            if not found:
                raise CalendarFileError(f"{path}: 'calendars' is empty")
            return found
        if not isinstance(data, dict) or not (name or data.get("name")):
            raise CalendarFileError(
                f"{path}: expected a 'calendars' table, or one calendar with a 'name' (or give --name)"
            )
        body = {k: v for k, v in data.items() if k != "name"}
        return [parse_calendar(name or data["name"], body)]
    except CalendarError as e:
        raise CalendarFileError(f"{path}: calendar {e.calendar!r}: {e.field}: {e.reason}") from None


def calendar_json(s: StoredCalendar, jobs: list[str] | None = None) -> dict:
    d = {
        "name": s.calendar.name,
        "version": s.version,
        "updated_at_ms": s.updated_at_ms,
        **calendar_to_dict(s.calendar),
    }
    if jobs is not None:
        d["jobs"] = [display_key(j) for j in jobs]
    return d


def _summary(c: Calendar) -> list:
    return [c.name, c.timezone, len(c.excluded_dates), len(c.excluded_ranges), describe_windows(c.windows)]


HEADERS = ["NAME", "TIMEZONE", "EXCLUDED DATES", "EXCLUDED RANGES", "WINDOWS", "VERSION", "UPDATED"]


def cmd_put(a: argparse.Namespace) -> int:
    calendars = read_calendar_file(a.file, a.name, a.tz)
    if a.expected_version is not None and len(calendars) != 1:
        raise CalendarFileError(
            f"--expected-version: {a.file} defines {len(calendars)} calendars; give it for a file of one"
        )
    with api_client(a) as c:
        stored = [c.put_calendar(cal, expected_version=a.expected_version) for cal in calendars]
    if a.json:
        print_json([calendar_json(s) for s in stored])
    else:
        for s in stored:
            print(f"calendar {s.calendar.name} version {s.version}")
    return 0


def cmd_get(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        s, jobs = c.get_calendar(a.name)
    if a.json:
        print_json(calendar_json(s, jobs))
        return 0
    cal = s.calendar
    print(table([_summary(cal) + [s.version, fmt_ms(s.updated_at_ms)]], HEADERS))
    for day in sorted(cal.excluded_dates):
        print(f"excluded date   {day.isoformat()}")
    for start, end in cal.excluded_ranges:
        print(f"excluded range  {fmt_ms(start)} .. {fmt_ms(end)}")
    print(f"used by         {', '.join(display_key(j) for j in jobs) if jobs else '(no job)'}")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        stored = c.list_calendars()
    if a.json:
        print_json([calendar_json(s) for s in stored])
    elif stored:
        print(table([_summary(s.calendar) + [s.version, fmt_ms(s.updated_at_ms)] for s in stored], HEADERS))
    else:
        print("no calendars", file=sys.stderr)
    return 0


def cmd_delete(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        c.delete_calendar(a.name, force=a.force)
    if a.json:
        print_json({"name": a.name, "deleted": True})
    else:
        print(f"calendar {a.name} deleted")
    return 0


def register(subparsers) -> None:
    cals = subparsers.add_parser(
        "calendars", help="named calendars jobs follow: holidays, business hours, excluded ranges"
    )
    sub = cals.add_subparsers(dest="calendars_command", metavar="COMMAND")
    sub.required = True

    put = sub.add_parser("put", help="create or replace the calendars of a TOML, YAML, JSON or .ics file")
    put.add_argument("file", metavar="FILE")
    put.add_argument("--name", help="the calendar's name (an .ics file, or a file of one calendar without one)")
    put.add_argument("--tz", metavar="ZONE", help="an .ics file's timezone for floating times (default UTC)")
    put.add_argument(
        "--expected-version",
        type=whole(0, MAX_VERSION),
        metavar="N",
        help="only if the stored calendar is at version N (0: only create)",
    )
    put.set_defaults(func=cmd_put)

    get = sub.add_parser("get", help="show a calendar and the jobs that name it")
    get.add_argument("name", metavar="NAME")
    get.set_defaults(func=cmd_get)

    ls = sub.add_parser("list", help="list the calendars")
    ls.set_defaults(func=cmd_list)

    delete = sub.add_parser("delete", help="delete a calendar (refused while a job names it, unless --force)")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument(
        "--force", action="store_true", help="delete even while jobs name it: they owe no slot until it is put again"
    )
    delete.set_defaults(func=cmd_delete)
    for p in (put, get, ls, delete):
        add_api_flags(p)
