"""What the Python schedulers' importers share: their errors, a cron field written from a set of values, a
check that arguments survive as JSON, and durations as a job file writes them."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Iterable
from typing import Any

from shardcron.errors import ShardcronError
from shardcron.spec.durations import format_duration_ms, parse_duration_ms


class SourceUnreadable(ShardcronError):
    """The source as a whole cannot be read (a module that does not import, a store that does not open):
    the message names what and why; no entry was translated."""


def require(module: str, what: str, install: str) -> None:
    """Refuse, naming what to install, when ``module`` (a scheduler's own package) does not import here."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise SourceUnreadable(f"{what} needs {module.partition('.')[0]} here: {install}") from None


class EntryRefused(Exception):
    """One entry cannot be expressed as a shardcron job; ``reason`` says why (it becomes a ``Refused``)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def cron_field(values: Iterable[int], lowest: int, highest: int) -> str:
    """The cron text of a field holding exactly ``values`` out of ``lowest..highest``: ``*`` when all are
    there, else runs of three or more consecutive values as ranges (``1-5``), the rest listed (``0,30``)."""
    wanted = sorted(set(values))
    if wanted == list(range(lowest, highest + 1)):
        return "*"
    parts: list[str] = []
    i = 0
    while i < len(wanted):
        j = i
        while j + 1 < len(wanted) and wanted[j + 1] == wanted[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{wanted[i]}-{wanted[j]}")
        else:
            parts.extend(str(v) for v in wanted[i : j + 1])
        i = j + 1
    return ",".join(parts)


def json_problem(value: Any, where: str = "") -> str | None:
    """Why ``value`` cannot travel as JSON (a job's args and kwargs do), naming where in it; None when it can.
    Tuples travel as lists, as the schedulers themselves send them."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'a value'} is {value!r}, which JSON does not hold"
    if isinstance(value, list | tuple):
        return next((p for i, v in enumerate(value) if (p := json_problem(v, f"{where}[{i}]"))), None)
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where or 'a table'} has the key {k!r}, which is not a string"
            if p := json_problem(v, f"{where}[{k!r}]"):
                return p
        return None
    return f"{where or 'a value'} is a {type(value).__name__} ({value!r:.60}), which JSON does not hold"


def as_json(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists); only for values ``json_problem`` passed."""
    return json.loads(json.dumps(value))


def ms_text(ms: int) -> str:
    """A duration in whole milliseconds as a job file writes it: ``5m``, ``1.5s``; ``90061001ms`` where the
    short form would not read back exactly."""
    short = format_duration_ms(ms)
    return short if parse_duration_ms(short, "duration") == ms else f"{ms}ms"
