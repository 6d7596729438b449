"""The values of the node's flags, checked after parsing: each refusal a ``ConfigError`` naming the flag.

An environment variable reaches a flag as text that argparse's ``type`` and
``choices`` never see, so every value is checked here, whichever way it came.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from shardcron.errors import ConfigError, InvalidJob
from shardcron.rules.retention import parse_retention_ms
from shardcron.spec.durations import parse_duration_ms
from shardcron.spec.retention import RetentionError

N = TypeVar("N", int, float)

_BYTE_UNITS = {"": 1, "b": 1, "kib": 1024, "kb": 1000, "mib": 1024**2, "mb": 1000**2, "gib": 1024**3, "gb": 1000**3}


def parse_bytes(name: str, raw: object) -> int:
    """A size in bytes: ``8388608``, ``8MiB``, ``512KiB``, ``1GB``."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(raw))
    unit = m and m.group(2).lower()
    if not m or unit not in _BYTE_UNITS:
        raise ConfigError(f"--{name}: expected a size such as 8388608, 8MiB or 512KiB, got {raw!r}")
    return int(m.group(1)) * _BYTE_UNITS[unit]


def duration_flag_ms(name: str, raw: str, minimum_ms: int) -> int:
    """A duration such as ``10s`` in ms, at least ``minimum_ms``."""
    try:
        ms = parse_duration_ms(raw, f"--{name}")
    except InvalidJob:
        raise ConfigError(f"--{name}: expected a duration such as 10s or 500ms, got {raw!r}") from None
    if ms < minimum_ms:
        raise ConfigError(f"--{name}: must be at least {minimum_ms}ms, got {raw!r}")
    return ms


def number(name: str, raw: object, kind: Callable[[Any], N], minimum: N) -> N:
    """``raw`` as ``kind`` (int or float), at least ``minimum``."""
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"--{name}: expected a number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"--{name}: must be at least {minimum}, got {value}")
    return value


def on_off(name: str, raw: object) -> bool:
    """``on`` or ``off``, as True or False."""
    return one_of(name, raw, ("on", "off")) == "on"


def one_of(name: str, raw: object, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the environment variable is not checked by argparse's choices)."""
    value = str(raw).strip().lower()
    if value not in choices:
        raise ConfigError(f"--{name}: expected {' or '.join(repr(c) for c in choices)}, got {raw!r}")
    return value


def hostport(name: str, value: str) -> str:
    """``value`` if it is ``host:port`` with a port from 0 to 65535."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--{name}: expected host:port, got {value!r}")
    return value


def tick_retention_ms(raw: str) -> int | None:
    """``--tick-retention`` in ms; None (``none``): every tick is kept."""
    try:
        return parse_retention_ms(raw, "--tick-retention")
    except RetentionError as e:
        raise ConfigError(str(e)) from None


def parse_min_interval_ms(raw: str) -> int:
    """``--min-interval``'s value in ms (node and ``shardcron config``); ``ConfigError`` naming the flag."""
    try:
        ms = parse_duration_ms(raw, "--min-interval")
    except InvalidJob:
        raise ConfigError(
            f"--min-interval: expected a duration such as 1s, 500ms or 1m (0: no minimum), got {raw!r}"
        ) from None
    if ms < 0:
        raise ConfigError(f"--min-interval: must not be negative, got {raw!r}")
    return ms


def allow_python(values: str | list[str] | None) -> tuple[str, ...]:
    """``--allow-python`` given once or more, or ``SHARDCRON_ALLOW_PYTHON=a,b``: dotted module prefixes."""
    if values is None:
        return ()
    raw = [values] if isinstance(values, str) else list(values)
    prefixes = [p.strip() for value in raw for p in value.split(",") if p.strip()]
    for prefix in prefixes:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", prefix):
            raise ConfigError(f"--allow-python: {prefix!r} is not a module name such as myapp or myapp.jobs")
    return tuple(dict.fromkeys(prefixes))


def shell_allow(pattern: str | None, allow_shell: bool) -> re.Pattern[str] | None:
    """``--shell-allow`` compiled; only with ``--allow-shell``."""
    if not pattern:
        return None
    if not allow_shell:
        raise ConfigError("--shell-allow only makes sense with --allow-shell")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"--shell-allow: not a regular expression: {e}") from None


__all__ = [
    "allow_python",
    "duration_flag_ms",
    "hostport",
    "number",
    "on_off",
    "one_of",
    "parse_bytes",
    "parse_min_interval_ms",
    "shell_allow",
    "tick_retention_ms",
]
