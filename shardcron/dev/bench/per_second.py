"""A measured window's lateness second by second, so that a chart can show it over time.

A tick belongs to the second its slot was scheduled in, counted from the window's opening: the burst of
every job falling due at second ``n`` is row ``n``, however late its last start was.
"""

from __future__ import annotations

from collections.abc import Iterable

from shardcron.dev.bench.harness import percentile


def lateness_per_second(started: Iterable[tuple[int, int]], from_ms: int, seconds: int) -> list[dict]:
    """One row per second of the window ``[from_ms, from_ms + seconds * 1000)``, in order: ``second`` (its
    offset from the opening), ``ticks`` (the slots scheduled in it that started) and their ``lateness_ms``
    p50, p99 and max (None for a second in which nothing started).

    ``started`` holds ``(scheduled_at_ms, started_at_ms)`` of each started tick; one scheduled outside the
    window is not counted."""
    by_second: list[list[float]] = [[] for _ in range(seconds)]
    for scheduled_ms, started_ms in started:
        second = (scheduled_ms - from_ms) // 1000
        if 0 <= second < seconds:
            by_second[second].append(started_ms - scheduled_ms)
    rows = []
    for second, lateness in enumerate(by_second):
        lateness.sort()
        rows.append(
            {
                "second": second,
                "ticks": len(lateness),
                "lateness_ms": {
                    "p50": percentile(lateness, 50),
                    "p99": percentile(lateness, 99),
                    "max": lateness[-1] if lateness else None,
                },
            }
        )
    return rows
