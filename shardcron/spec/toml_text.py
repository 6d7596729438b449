"""Plain values as inline TOML text: what a job file holds (text, numbers, booleans, lists, tables).

``tomllib`` reads TOML but nothing in the standard library writes it, and a job
file needs only inline values, so this is the one writer the package has: the
importers write job files with it and the reference pages their examples.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: JSON's escapes are TOML's, except that TOML wants DEL escaped too.

    ``ensure_ascii=False`` keeps characters past the BMP as themselves, where JSON's ASCII form would write
    surrogate pairs, which TOML refuses."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_key(key: str) -> str:
    """A table key: bare when TOML allows it, else quoted."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """``value`` (text, a number, a boolean, a list or a table) as an inline TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)  # Python's float text (1.5, 1e+20, inf, nan) is TOML's
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"a job file holds no {type(value).__name__} ({value!r})")


__all__ = ["toml_key", "toml_string", "toml_value"]
