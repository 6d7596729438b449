"""A measured window's lateness second by second: each tick in the second its slot was scheduled in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardcron.dev.bench.per_second import lateness_per_second

OPEN = 1_700_000_000_000  # the window's opening, in ms


def row(second: int, ticks: int, p50=None, p99=None, most=None) -> dict:
    return {"second": second, "ticks": ticks, "lateness_ms": {"p50": p50, "p99": p99, "max": most}}


@pytest.mark.parametrize(
    "started, seconds, rows",
    [
        ([], 2, [row(0, 0), row(1, 0)]),
        ([(OPEN, OPEN + 3)], 1, [row(0, 1, 3, 3, 3)]),
        # A burst: every job due at the same millisecond, started one after another.
        ([(OPEN + 1000, OPEN + 1000 + late) for late in (4, 1, 2)], 2, [row(0, 0), row(1, 3, 2, 4, 4)]),
        # A slot belongs to the second it was scheduled in, not the one it started in.
        ([(OPEN + 999, OPEN + 2500)], 3, [row(0, 1, 1501, 1501, 1501), row(1, 0), row(2, 0)]),
        # Slots scheduled before the opening or at its close are not the window's.
        ([(OPEN - 1, OPEN + 5), (OPEN + 2000, OPEN + 2001)], 2, [row(0, 0), row(1, 0)]),
        # p99 of 100 ticks is the 99th, not the slowest.
        ([(OPEN, OPEN + late) for late in range(1, 101)], 1, [row(0, 100, 51, 99, 100)]),
    ],
)
def test_each_second_has_its_ticks_and_their_lateness(started, seconds, rows):
    assert lateness_per_second(started, OPEN, seconds) == rows


@given(
    st.lists(st.tuples(st.integers(-2000, 12_000), st.integers(0, 5000))),
    st.integers(1, 10),
)
def test_every_tick_in_the_window_is_counted_once_and_the_figures_are_ordered(slots, seconds):
    started = [(OPEN + offset, OPEN + offset + late) for offset, late in slots]
    rows = lateness_per_second(started, OPEN, seconds)
    assert [r["second"] for r in rows] == list(range(seconds))
    assert sum(r["ticks"] for r in rows) == sum(1 for offset, _ in slots if 0 <= offset < seconds * 1000)
    for r in rows:
        lat = r["lateness_ms"]
        if r["ticks"]:
            assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]
        else:
            assert lat == {"p50": None, "p99": None, "max": None}
