"""Garbage collection between starts, not in front of one.

CPython's cyclic collector holds the GIL while it runs: every thread of the
node stops, the dispatcher included. With the interpreter deciding when, a
collection lands wherever an allocation crosses the threshold, often in front
of a due start. Measured with ``bench fairness`` and a ``gc.callbacks`` log
(2,000 HTTP slots/s flooding 100 executor slots): young collections at the
node's old threshold of 50,000 took 8 to 46 ms, every 2 to 3 s, and the calm
namespace's latest starts were exactly those pauses.

The dispatcher knows when its next start is due, so it collects in the gaps,
sooner and smaller (``SOFT``), and leaves the interpreter's own thresholds
(``HARD``, set by the node) as the backstop. After each dispatch, and at
least every ``IDLE_CHECK_S`` while it waits:

    counts = gc.get_count()   # allocations; young collections; middle ones
    for g in 2, 1, 0 (the oldest first):
      count[g] < SOFT[g]                   -> not due, look at the next younger
      count[g] >= HARD[g] (g > 0)          -> collect g now: no gap has come for
                                              it, and memory must stay bounded
      its pause estimate fits the gap      -> collect g
      otherwise                            -> look at the next younger
    none -> nothing

A generation's pause estimate is its last pause, or falls slowly toward it
(``next_estimate``), so one long pause is not forgotten at once. Young
collections keep the allocation count under ``HARD[0]``, so the interpreter
collects on its own only when the dispatcher finds no gap for ``HARD[0]``
allocations.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

SOFT = (5_000, 10, 10)  # collect at these counts when the gap to the next start allows
HARD = (50_000, 20, 20)  # the interpreter's thresholds (the node sets them); past these, collect anyway
FIRST_ESTIMATES_MS = (5.0, 30.0, 60.0)  # before a generation's first measured pause
MARGIN = 1.5  # a collection fits a gap of at least this times its estimate...
MARGIN_MS = 1.0  # ...plus this
IDLE_CHECK_S = 0.25  # the dispatcher waiting for a far start looks this often


def generation_to_collect(
    counts: tuple[int, int, int],
    gap_ms: float | None,
    pause_ms: tuple[float, float, float],
    soft: tuple[int, int, int] = SOFT,
    hard: tuple[int, int, int] = HARD,
) -> int | None:
    """The generation to collect now (see the module doc); ``gap_ms`` None: nothing is due."""
    for g in (2, 1, 0):
        if counts[g] < soft[g]:
            continue
        if g and counts[g] >= hard[g]:
            return g
        if gap_ms is None or pause_ms[g] * MARGIN + MARGIN_MS <= gap_ms:
            return g
    return None


def next_estimate(previous_ms: float, measured_ms: float) -> float:
    """A longer pause is believed at once; a shorter one moves the estimate a fifth of the way."""
    return measured_ms if measured_ms >= previous_ms else previous_ms * 0.8 + measured_ms * 0.2


class GcPacer:
    """Collects when ``between_starts`` says the gap allows (the dispatcher calls it; one thread)."""

    def __init__(
        self, collect: Callable[[int], object] = gc.collect, counts: Callable[[], tuple[int, int, int]] = gc.get_count
    ):
        self._collect = collect
        self._counts = counts
        self.pause_ms = list(FIRST_ESTIMATES_MS)

    def between_starts(self, gap_ms: float | None) -> int | None:
        """Collect if a generation is due and fits ``gap_ms``; the generation collected, or None."""
        pause = self.pause_ms
        g = generation_to_collect(self._counts(), gap_ms, (pause[0], pause[1], pause[2]))
        if g is not None:
            started = time.perf_counter()
            self._collect(g)
            self.pause_ms[g] = next_estimate(self.pause_ms[g], (time.perf_counter() - started) * 1000.0)
        return g


__all__ = ["GcPacer", "HARD", "IDLE_CHECK_S", "SOFT", "generation_to_collect", "next_estimate"]
