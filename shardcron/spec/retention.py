"""A job's history limit (how many ticks the store keeps), and the error a malformed retention setting raises."""

from __future__ import annotations

from shardcron.errors import ShardcronError


class RetentionError(ShardcronError, ValueError):
    """A retention setting is malformed. ``field`` names the flag or job field."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def parse_history_limit(value: object, field: str = "history_limit") -> int | None:
    """A job's history limit: a whole number of ticks, at least 1; absent keeps everything."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RetentionError(field, f"must be a whole number of ticks, at least 1, got {value!r}")
    return value
