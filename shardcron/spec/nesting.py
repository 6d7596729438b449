"""Nesting depth of a caller's structured data, measured without recursion.

Python's parsers (``json``, ``tomllib``, PyYAML's composer) and walkers
(``json.dumps``, ``copy``, ``==``) recurse once per level, so ``"[" * 100000``
would end in a ``RecursionError`` wherever it is first touched. Everything
here walks with an explicit stack or a flat scan, and refuses what is deeper
than the limit (``bounds.MAX_JSON_DEPTH``, ``bounds.MAX_FILE_DEPTH``) with an
``InvalidJob`` naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from shardcron.errors import InvalidJob
from shardcron.spec.bounds import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH, shown

# A JSON string, escapes included: what lies inside one is no nesting.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def text_depth(text: str, limit: int) -> int:
    """The deepest bracket nesting of JSON ``text``, counted up to ``limit + 1`` (it stops there).

    Brackets inside strings do not count. Malformed text is measured as well as it can be;
    the parser that follows says what is wrong with it.
    """
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub('""', text) if '"' in text else text):
        if m.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        else:
            depth -= 1
    return deepest


def load_json(text: str, field: str, limit: int = MAX_JSON_DEPTH, *, check_values: bool = True) -> Any:
    """JSON ``text`` as values, refused (naming ``field``) when malformed or nested deeper than ``limit``.

    ``check_values``: also refuse an integer beyond 64 bits (``check_json_value``); a value read back
    from the store was admitted under the bounds of its day, so it skips them.
    """
    if text_depth(text, limit) > limit:
        raise InvalidJob(field, f"is nested deeper than the limit of {limit} levels")
    try:
        value = json.loads(text)
    except RecursionError:  # unreachable after the scan above, kept so that no input can escape as one
        raise InvalidJob(field, f"is nested deeper than the limit of {limit} levels") from None
    except ValueError as e:
        raise InvalidJob(field, f"is not valid JSON: {shown(str(e), 200)}") from None
    if check_values:
        check_json_value(value, field, limit)
    return value


def value_depth(value: Any, limit: int) -> int:
    """The nesting depth of lists, tuples and mappings in ``value`` (a scalar is 0), counted up to ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def check_json_value(value: Any, field: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse ``value`` when nested deeper than ``limit``, or holding an integer beyond 64 bits (what msgpack,
    a protobuf field or a worker in another language could not take back)."""
    if value_depth(value, limit) > limit:
        raise InvalidJob(field, f"is nested deeper than the limit of {limit} levels")
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if not INT64_MIN <= item <= INT64_MAX:
                raise InvalidJob(field, f"holds {shown(item)}, outside the signed 64-bit range")
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


__all__ = ["check_json_value", "load_json", "text_depth", "value_depth"]
