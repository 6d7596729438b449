"""Durations, times and timezones as a job gives them: ``"1m30s"``, ISO-8601 times, IANA zone names."""

from __future__ import annotations

import functools
import math
import re
import zoneinfo
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from shardcron.errors import InvalidJob
from shardcron.spec.bounds import MAX_DURATION_MS, shown

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str | int | float, field: str = "duration") -> int:
    """``"90s"``, ``"1m30s"``, ``"250ms"``, ``"2h"`` or a number of seconds; at most ten years.

    Decimal arithmetic, so a value near the limit is judged exactly, not after float rounding.
    """
    # Checked before the cache: a list or a dict cannot be a cache key, and a subclass of str or
    # int (a YAML scalar type) becomes the plain value so it hashes like one.
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise InvalidJob(field, f"expected a duration such as 30s, 5m or 1h30m, got {shown(text)}")
    plain = str(text) if isinstance(text, str) else int(text) if isinstance(text, int) else float(text)
    return _parse_duration_ms(plain, field)


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True must not hit the entry of 1
def _parse_duration_ms(text: str | int | float, field: str) -> int:
    bad = InvalidJob(field, f"expected a duration such as 30s, 5m or 1h30m, got {shown(text)}")
    if isinstance(text, float) and not math.isfinite(text):
        raise bad
    if isinstance(text, int | float):
        total = Decimal(str(text)) * 1000
    else:
        s = str(text).strip().lower()
        if len(s) > 64:  # no duration is this long; the part regex below backtracks quadratically on digits
            raise bad
        if re.fullmatch(r"\d+(\.\d+)?", s):
            total = Decimal(s) * 1000
        else:
            pos, total = 0, Decimal(0)
            for m in _DURATION_PART.finditer(s):
                if m.start() != pos:
                    break
                total += Decimal(m.group(1)) * _UNIT_MS[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                raise bad
    if abs(total) > MAX_DURATION_MS:
        raise InvalidJob(field, f"{shown(text)} is longer than the limit of ten years")
    return int(total.to_integral_value())


def format_duration_ms(ms: int | None) -> str:
    """The inverse of ``parse_duration_ms``: 1500 -> 1.5s, 90000 -> 1m30s, 86400000 -> 1d."""
    if ms is None:
        return "-"
    if ms < 1000 or ms % 1000 and ms < 60_000:
        return f"{ms}ms" if ms < 1000 else f"{ms / 1000:g}s"
    out, rest = "", ms // 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out


def parse_time_ms(text: str | int | float | datetime, timezone: str = "UTC", field: str = "at") -> int:
    """An ISO-8601 time (naive times are read in ``timezone``) or epoch milliseconds."""
    if isinstance(text, bool):
        raise InvalidJob(field, f"expected an ISO-8601 time, got {shown(text)}")
    if isinstance(text, float) and not math.isfinite(text):
        raise InvalidJob(field, f"expected an ISO-8601 time, got {shown(text)}")
    if isinstance(text, int | float):
        return int(text)
    if isinstance(text, datetime):
        dt = text
    else:
        try:
            dt = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidJob(
                field, f"expected an ISO-8601 time such as 2030-01-01T09:00:00+01:00, got {shown(text)}"
            ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=load_timezone(timezone))
    return (dt - _EPOCH_UTC) // _ONE_MS  # whole milliseconds, exact: no float rounding near year 9999


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)

_ONE_MS = timedelta(milliseconds=1)


def load_timezone(name: str, field: str = "timezone") -> zoneinfo.ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidJob(field, "must be an IANA zone name such as UTC or Europe/Lisbon")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidJob(field, f"unknown timezone {shown(name)}; use an IANA name such as Europe/Lisbon") from None


def duration_field(d: Mapping[str, Any], key: str, field: str, default: int, minimum: int = 1) -> int:
    """The duration ``d[key]`` in ms, ``default`` when absent; refused below ``minimum``."""
    if key not in d or d[key] is None:
        return default
    ms = parse_duration_ms(d[key], field)
    if ms < minimum:
        raise InvalidJob(field, f"must be at least {minimum} ms, got {shown(d[key])}")
    return ms
