"""Calendars between protobuf and ``spec.calendar.Calendar``, for the server and the client."""

from __future__ import annotations

from shardcron.spec.calendar import Calendar, CalendarError, StoredCalendar
from shardcron.spec.calendar_tables import calendar_to_dict, parse_calendar
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import BadRequest


def calendar_from_proto(p: pb.Calendar) -> Calendar:
    """The calendar a request defines; ``BadRequest`` (INVALID_ARGUMENT) naming the field otherwise."""
    d: dict = {"timezone": p.timezone or "UTC"}
    if p.exclude_dates:
        d["exclude_dates"] = list(p.exclude_dates)
    if p.windows:
        d["windows"] = [{"days": w.days, "start": w.start, "end": w.end} for w in p.windows]
    if p.exclude_ranges:
        d["exclude_ranges"] = [{"from": r.from_ms, "to": r.to_ms} for r in p.exclude_ranges]
    if p.ics:
        d["ics"] = p.ics
    try:
        return parse_calendar(p.name, d)
    except CalendarError as e:
        raise BadRequest(f"calendar.{e.field}", f"calendar {e.calendar!r}: {e.reason}") from None


def calendar_to_proto(calendar: Calendar, version: int = 0, updated_at_ms: int = 0) -> pb.Calendar:
    d = calendar_to_dict(calendar)
    return pb.Calendar(
        name=calendar.name,
        timezone=d["timezone"],
        exclude_dates=d.get("exclude_dates", []),
        windows=[pb.CalendarWindow(days=w["days"], start=w["start"], end=w["end"]) for w in d.get("windows", [])],
        exclude_ranges=[pb.CalendarRange(from_ms=r["from"], to_ms=r["to"]) for r in d.get("exclude_ranges", [])],
        version=version,
        updated_at_ms=updated_at_ms,
    )


def stored_calendar_from_proto(p: pb.Calendar) -> StoredCalendar:
    """A calendar as the server answered it."""
    return StoredCalendar(calendar_from_proto(p), p.version, p.updated_at_ms)


def calendar_dict_to_proto(name: str, d: dict) -> pb.Calendar:
    """A calendar given as plain data (a CLI file): checked here first, so the error names the file's field."""
    return calendar_to_proto(parse_calendar(name, d))


__all__ = ["calendar_dict_to_proto", "calendar_from_proto", "calendar_to_proto", "stored_calendar_from_proto"]
