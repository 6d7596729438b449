"""Instants written as text in table tests, and a trigger that counts how often it is asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(text: str) -> int:
    """ISO-8601 UTC text ("2026-03-08T07:00Z", seconds and .mmm optional) as epoch ms."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert dt.utcoffset() == timedelta(0), "write expected instants in UTC"
    return (dt - EPOCH) // timedelta(milliseconds=1)


class CountingTrigger:
    """Counts the calls, so a test can show a search jumps instead of stepping."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def next_after(self, after_ms):
        self.calls += 1
        return self.inner.next_after(after_ms)
