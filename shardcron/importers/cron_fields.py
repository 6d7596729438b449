"""A classic cron schedule (five fields or a macro) checked and translated into shardcron's ``cron`` form.

Shardcron reads ``cron`` with croniter, which matches Vixie cron (cronie) for every field form this module lets
through. Two cron dialects read their source here:

* ``vixie``, a crontab: no ``?``; a step only after ``*`` or a range (``5/10`` means different things to
  different crons, so it is refused rather than guessed).
* ``k8s``, a CronJob's ``spec.schedule`` (robfig/cron): ``?`` means ``*`` in the day fields, and ``5/10``
  means ``5-MAX/10``; both are rewritten.

Day of month and day of week, both restricted, mean OR in cron ("the 1st, or any Monday"), and in croniter.
When one of them starts with ``*`` (``*/2``), Vixie cron means AND instead; shardcron cannot express an AND of
two restrictions, so that schedule is refused, naming the rule. ``L``, ``W`` and ``#`` (Quartz) are refused:
cron has none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardcron.spec.bounds import shown

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0  # the number of the first name (jan is 1, sun is 0)


FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _DAYS, 0),
)
_DOM, _DOW = 2, 4
_DIGITS = 4  # no field value or useful step is longer; longer ones are refused before int() reads them
_QUARTZ = re.compile(r"^[0-9]*(l|w|lw)$")
_ELEMENT = re.compile(r"^(?P<base>\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/(?P<step>[0-9]+))?$")


class UnsupportedSchedule(ValueError):
    """A schedule that cannot be expressed in shardcron's cron; the message says why."""


@dataclass(frozen=True)
class Translated:
    """A schedule as shardcron's ``cron`` key takes it, with what the reader should know about it."""

    cron: str
    notes: tuple[str, ...] = ()


def translate_schedule(text: str, dialect: str = "vixie") -> Translated:
    """``text`` (five fields or a macro) as a shardcron cron expression; ``UnsupportedSchedule`` says why not."""
    words = text.split()
    if words and words[0].startswith("@"):
        words[0] = words[0].lower()
        if words[0] == "@reboot":
            raise UnsupportedSchedule("@reboot runs once when the machine starts; shardcron has no such slot")
        if words[0] == "@every":
            raise UnsupportedSchedule("@every counts from when the job was added; write shardcron's every by hand")
        if words[0] not in MACROS or len(words) > 1:
            raise UnsupportedSchedule(f"{words[0]} is not a cron macro (known: {', '.join(MACROS)}, @reboot)")
        return Translated(MACROS[words[0]])
    if len(words) != 5:
        raise UnsupportedSchedule(f"{len(words)} schedule fields; cron has five")
    fields = [_field_text(word, spec, dialect) for word, spec in zip(words, FIELDS, strict=True)]
    notes = _day_rule(fields[_DOM], fields[_DOW], dialect)
    return Translated(" ".join(fields), notes)


def _field_text(word: str, spec: _Field, dialect: str) -> str:
    """One field, checked element by element, as croniter should read it (k8s forms rewritten).
    Messages quote ``word`` as written; names are matched in any case."""
    as_written, word = word, word.lower()
    if "#" in word or any(_QUARTZ.match(part) for part in re.split(r"[,/-]", word)):
        raise UnsupportedSchedule(
            f"{spec.name} {shown(as_written)}: L, W and # are not cron syntax (Quartz extensions)"
        )
    if word == "*/1" or (word == "?" and dialect == "k8s" and spec.name.startswith("day")):
        return "*"  # every value: '*' itself, so that the day rule below reads it as unrestricted, as cron does
    return ",".join(_element_text(element, spec, as_written, dialect) for element in word.split(","))


def _element_text(element: str, spec: _Field, word: str, dialect: str) -> str:
    m = _ELEMENT.match(element)
    if m is None:
        raise UnsupportedSchedule(f"{spec.name} {shown(word)}: {shown(element)} is not a value, a range or a step")
    base, step = m["base"], m["step"]
    if step is not None and (len(step) > _DIGITS or int(step) == 0):
        raise UnsupportedSchedule(f"{spec.name} {shown(word)}: a step of {shown(step)} never advances")
    if base == "*":
        return element
    bounds = [_value(part, spec, word) for part in base.split("-")]
    if len(bounds) == 2 and bounds[0] > bounds[1]:
        raise UnsupportedSchedule(f"{spec.name} {shown(word)}: the range {shown(base)} runs backwards")
    if step is not None and len(bounds) == 1:
        if dialect != "k8s":
            raise UnsupportedSchedule(
                f"{spec.name} {shown(word)}: a step after a single value ({shown(element)}) means different things to "
                f"different crons; write {bounds[0]}-{spec.high}/{step} or {bounds[0]}"
            )
        return f"{bounds[0]}-{spec.high}/{step}"
    text = "-".join(str(b) for b in bounds)
    return f"{text}/{step}" if step is not None else text


def _value(part: str, spec: _Field, word: str) -> int:
    if part in spec.names:
        return spec.names.index(part) + spec.name_base
    if not part.isdigit():
        raise UnsupportedSchedule(f"{spec.name} {shown(word)}: {shown(part)} is not a number or a name cron knows")
    if len(part) > _DIGITS or not spec.low <= int(part) <= spec.high:
        raise UnsupportedSchedule(f"{spec.name} {shown(word)}: {shown(part)} is outside {spec.low}-{spec.high}")
    return int(part)


def _day_rule(dom: str, dow: str, dialect: str) -> tuple[str, ...]:
    """The notes the day fields need, or ``UnsupportedSchedule`` when cron's day rule has no equivalent."""
    if dom == "*" or dow == "*":
        return ()
    # Vixie cron ANDs the day fields when one starts with '*'; robfig/cron when one is '*' or '?' (rewritten above).
    if dialect == "vixie" and (dom.startswith("*") or dow.startswith("*")):
        raise UnsupportedSchedule(
            f"day of month {shown(dom)} and day of week {shown(dow)}: Vixie cron runs it only on days matching both (its "
            "rule when one starts with '*'), and shardcron's cron cannot say 'both' (it reads either); split it "
            "into two jobs or narrow one field"
        )
    return (f"runs on days matching day of month {shown(dom)} OR day of week {shown(dow)}, as cron does",)
