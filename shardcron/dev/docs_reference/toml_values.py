"""Plain values written as one line of TOML, and read back to prove it: a page's examples are copied into
job files, so each must be exactly what it claims."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from shardcron.spec.durations import format_duration_ms
from shardcron.spec.toml_text import toml_key, toml_value

_MS = re.compile(r"(\d+)ms")


def line(path: str, v: Any) -> str:
    """``path = v`` as a TOML line, a dotted ``path`` as nested inline tables, checked by reading it back."""
    head, *rest = path.split(".")
    nested: Any = v
    for part in reversed(rest):
        nested = {part: nested}
    text = f"{toml_key(head)} = {toml_value(nested)}"
    if tomllib.loads(text) != json.loads(json.dumps({head: nested})):
        raise ValueError(f"{text!r} does not read back as {path} = {v!r}")
    return text


def shown_default(v: Any) -> str:
    """A default as a job file would give it: ``3600000ms`` as ``1h``, other values as TOML."""
    if isinstance(v, str) and (m := _MS.fullmatch(v)):
        return toml_value(format_duration_ms(int(m.group(1))))
    return toml_value(v)


__all__ = ["line", "shown_default"]
