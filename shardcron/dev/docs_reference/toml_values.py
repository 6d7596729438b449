"""Plain values written as one line of TOML, and read back to prove it: a page's examples are copied into
job files, so each must be exactly what it claims."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from shardcron.spec.durations import format_duration_ms

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_MS = re.compile(r"(\d+)ms")


def value(v: Any) -> str:
    """``v`` as an inline TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {type(v).__name__}")


def key(k: str) -> str:
    return k if _BARE.fullmatch(k) else json.dumps(k)


def line(path: str, v: Any) -> str:
    """``path = v`` as a TOML line, a dotted ``path`` as nested inline tables, checked by reading it back."""
    head, *rest = path.split(".")
    nested: Any = v
    for part in reversed(rest):
        nested = {part: nested}
    text = f"{key(head)} = {value(nested)}"
    if tomllib.loads(text) != json.loads(json.dumps({head: nested})):
        raise ValueError(f"{text!r} does not read back as {path} = {v!r}")
    return text


def shown_default(v: Any) -> str:
    """A default as a job file would give it: ``3600000ms`` as ``1h``, other values as TOML."""
    if isinstance(v, str) and (m := _MS.fullmatch(v)):
        return value(format_duration_ms(int(m.group(1))))
    return value(v)


__all__ = ["key", "line", "shown_default", "value"]
