"""The calendars a node schedules by: its copy of the stored ones, replaced whole on each reload. Pure.

A job names calendars; ``resolve`` turns its names into the calendars to pass to
``calendars.next_allowed``, or says which name is unknown. A job that names a
calendar the store no longer has (deleted with --force) owes no slot until it is
put again: guessing that it allows everything would run the job where its owner
asked for it not to run.

Readers (the claimer, the dispatcher, the API) take ``self._by_name`` once per
question; ``replace`` swaps the whole dict, so no lock is needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shardcron.rules.calendars import first_exclusion
from shardcron.spec.calendar import Calendar


@dataclass(frozen=True)
class Unknown:
    """The first name of a job's calendars the book does not hold."""

    name: str

    @property
    def reason(self) -> str:
        return f"calendar {self.name!r} does not exist: no slot is owed until it is put again"


class CalendarBook:
    """The node's calendars by name."""

    def __init__(self, calendars: Iterable[Calendar] = ()):
        self._by_name: dict[str, Calendar] = {c.name: c for c in calendars}

    def replace(self, calendars: Iterable[Calendar]) -> set[str]:
        """Hold exactly ``calendars`` from now on; returns the names that were added, changed or removed."""
        new = {c.name: c for c in calendars}
        old = self._by_name
        self._by_name = new
        return {n for n in old.keys() | new.keys() if old.get(n) != new.get(n)}

    def put(self, calendar: Calendar) -> bool:
        """One calendar written by this node, known here at once (before the reload its bump brings,
        which then finds nothing changed); True when it differs from the one held."""
        changed = self._by_name.get(calendar.name) != calendar
        self._by_name = {**self._by_name, calendar.name: calendar}
        return changed

    def remove(self, name: str) -> bool:
        """One calendar this node deleted; True when it was held."""
        held = name in self._by_name
        self._by_name = {n: c for n, c in self._by_name.items() if n != name}
        return held

    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def get(self, name: str) -> Calendar | None:
        return self._by_name.get(name)

    def resolve(self, names: Sequence[str]) -> tuple[Calendar, ...] | Unknown:
        by_name = self._by_name
        out = []
        for n in names:
            c = by_name.get(n)
            if c is None:
                return Unknown(n)
            out.append(c)
        return tuple(out)

    def allows(self, names: Sequence[str], slot_ms: int) -> str | None:
        """None when every calendar of ``names`` allows the slot, else why not."""
        cals = self.resolve(names)
        return cals.reason if isinstance(cals, Unknown) else first_exclusion(cals, slot_ms)


__all__ = ["CalendarBook", "Unknown"]
