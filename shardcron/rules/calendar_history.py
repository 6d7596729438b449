"""Which calendar version was in force at a slot, for the audit. Pure.

Each calendar's history is its versions in order, each with the writer's clock
when it took effect (``store.calendars.calendar_history``); a deleted calendar's
entry has no calendar. A slot is judged by the version in force at it: the newest
that took effect at or before the slot. Before a calendar's first version (a job
cannot name a calendar that does not exist yet, but its definition may be older
than a slot the audit reads) the first version is used.

A change reaches every node through etcd and a reload, and a slot is claimed a
lookahead before it: for ``CHANGE_GRACE_MS`` after a change, a slot that the old
and the new version judge differently may have been scheduled under either, so
it is ``EITHER``: a row is fine, and so is none. After that grace, the new
version alone decides.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shardcron.spec.calendar import Calendar

# Longer than the watch's delivery, the reload and a lookahead together; the
# periodic reload (every CALENDAR_RELOAD_S) is the backstop a missed watch falls back on.
CHANGE_GRACE_MS = 5_000


class Verdict(enum.Enum):
    OWED = "owed"
    EXCLUDED = "excluded"  # not owed: a calendar in force excluded it
    EITHER = "either"  # just after a change that flips it: a row or none are both right


@dataclass(frozen=True)
class Version:
    effective_at_ms: int
    calendar: Calendar | None  # None: deleted from then on (nothing owed)


class History:
    """``versions``: calendar name -> its versions, oldest first."""

    def __init__(self, versions: Mapping[str, Sequence[Version]]):
        self._versions = {n: list(vs) for n, vs in versions.items() if vs}
        self._starts = {n: [v.effective_at_ms for v in vs] for n, vs in self._versions.items()}

    def _in_force(self, name: str, slot_ms: int) -> tuple[Version | None, Version | None]:
        """(the version in force at the slot, the one before it when it took effect within the grace)."""
        vs = self._versions.get(name)
        if not vs:
            return None, None
        i = max(bisect_right(self._starts[name], slot_ms) - 1, 0)
        before = vs[i - 1] if i > 0 and slot_ms - vs[i].effective_at_ms < CHANGE_GRACE_MS else None
        return vs[i], before

    def judge(self, names: Sequence[str], slot_ms: int) -> Verdict:
        """The verdict on one slot of a job that names ``names``."""
        if not names:
            return Verdict.OWED
        now_ok, before_ok = True, True
        flips = False
        for name in names:
            current, before = self._in_force(name, slot_ms)
            ok = _allows(current, slot_ms)
            now_ok = now_ok and ok
            if before is not None:
                flips = True
                before_ok = before_ok and _allows(before, slot_ms)
            else:
                before_ok = before_ok and ok
        if flips and now_ok != before_ok:
            return Verdict.EITHER
        return Verdict.OWED if now_ok else Verdict.EXCLUDED


def _allows(version: Version | None, slot_ms: int) -> bool:
    return version is not None and version.calendar is not None and version.calendar.allows(slot_ms)


__all__ = ["CHANGE_GRACE_MS", "History", "Verdict", "Version"]
