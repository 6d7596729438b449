"""A job's plain values: keys, ids, whole numbers, enums, printable text and headers, checked one field at a time.

Every rejection is an ``InvalidJob`` that names the field and says why.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from shardcron.errors import InvalidJob
from shardcron.spec.bounds import cut, shown, unprintable

E = TypeVar("E", bound=Enum)


MAX_JOB_ID_BYTES = 256


def utf8_size(text: str, field: str) -> int:
    """``text``'s size in UTF-8 bytes; refused when it holds a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidJob(field, "is not valid Unicode text (it holds a lone surrogate)") from None


def validate_job_id(job_id: Any, field: str = "id", *, printable: bool = True) -> str:
    """``job_id`` if it is a valid id: 1-256 bytes of UTF-8, printable (``check_printable``) unless not
    ``printable`` (an id read back from the store, where only control characters were ever refused)."""
    if not isinstance(job_id, str) or not job_id:
        raise InvalidJob(field, "must be a non-empty string")
    if len(job_id) > MAX_JOB_ID_BYTES:  # each character is at least a byte: no need to encode a huge one
        raise InvalidJob(field, f"is {len(job_id)} characters long; the limit is {MAX_JOB_ID_BYTES} bytes")
    try:
        size = len(job_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidJob(field, "must be valid Unicode (no lone surrogates)") from None
    if size > MAX_JOB_ID_BYTES:
        raise InvalidJob(field, f"is {size} bytes long; the limit is {MAX_JOB_ID_BYTES}")
    if printable:
        check_printable(job_id, field)
    elif CONTROL_CHAR.search(job_id):
        raise InvalidJob(field, "must not contain control characters")
    return job_id


# C0 controls and DEL: refused in every id and label, even one read back from the store.
CONTROL_CHAR = re.compile("[\x00-\x1f\x7f]")


def check_printable(text: str, field: str, what: str = "") -> None:
    """Refuse ``text`` holding a character a listing would not show as it is (``bounds.unprintable``):
    a control character, a bidi override or a zero-width space would make one id look like another."""
    bad = unprintable(text)
    if bad is not None:
        raise InvalidJob(
            field,
            f"{what}must hold printable characters only, and {bad} is not (no control characters, "
            "bidi or zero-width format characters, private-use, unassigned or non-ASCII spaces)",
        )


def check_keys(d: Mapping[Any, Any], allowed: frozenset[str], where: str = "", what: str = "") -> None:
    """Refuse the first key of ``d`` not in ``allowed``, naming it, with a "did you mean" when one is close."""
    for key in d:
        if key in allowed:
            continue
        # The key is the caller's text: cut, so a megabyte key is not echoed whole.
        name = cut(key) if isinstance(key, str) else shown(key)
        field = f"{where}.{name}" if where else name
        close = isinstance(key, str) and len(key) <= 64  # difflib is quadratic: a huge key is no typo
        hint = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6) if close else []
        said = f"unknown key{what}"
        if hint:
            raise InvalidJob(field, f"{said}; did you mean {hint[0]!r}?")
        raise InvalidJob(field, f"{said}; expected one of: {', '.join(sorted(allowed))}")


def enum_value(cls: type[E], value: object, field: str) -> E:
    """The member of ``cls`` whose value is ``value`` (any case)."""
    try:
        if isinstance(value, str):
            return cls(value.lower())
    except ValueError:
        pass
    raise InvalidJob(field, f"{shown(value)} is not one of: {', '.join(m.value for m in cls)}")


def whole_number(value: object, field: str, minimum: int | None = None) -> int:
    """``value`` if it is an int (not a bool), at least ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(field, f"must be a whole number, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise InvalidJob(field, f"must be at least {minimum}, got {shown(value)}")
    return value


def parse_headers(raw: object, field: str) -> tuple[tuple[str, str], ...]:
    """HTTP-style headers, a table of name = value or a list of [name, value] pairs."""
    if raw is None:
        return ()
    items: Any = raw.items() if isinstance(raw, Mapping) else raw  # the caller's data: iterated inside the try
    out: list[tuple[str, str]] = []
    try:
        for k, v in items:
            if not isinstance(k, str) or not k or any(c in k for c in ":\r\n \t") or not k.isascii():
                raise InvalidJob(field, f"bad header name {shown(k)}")
            if not isinstance(v, str) or any(c in v for c in "\r\n") or utf8_size(v, field) > 8192:
                raise InvalidJob(field, f"header {shown(k)} has a bad value")
            out.append((k, v))
    except (TypeError, ValueError):
        raise InvalidJob(field, "must be a table of name = value") from None
    return tuple(out)
