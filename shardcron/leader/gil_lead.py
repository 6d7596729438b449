"""The dispatcher takes the GIL before a start is due, not after.

The node is one Python process: the dispatcher runs a start only once it
holds the GIL. ``bench fairness`` beside a flood on PostgreSQL, with ``perf
sched`` and a log of the dispatcher's passes: the operating system woke the
dispatcher on time (scheduling delay p99 0.1 ms), but it resumed 2 to 11 ms
later. The executors' loop, the running-mark writer and the recorder hand
the GIL to each other on every socket call, and a thread returning from one
takes it straight back while the woken dispatcher is still getting a core:
the convoy of bpo-7946. A shorter switch interval does not help: a waiting
thread asks the holder to drop the GIL only if nobody switched during its
interval, and here someone always did.

So the dispatcher aims ``lead`` early, gets the GIL in whatever time the
convoy takes, and then waits out the rest of the lead *holding* it: a
``clock_nanosleep`` to the due instant called through ``ctypes.PyDLL``, which
keeps the GIL (a sleep, not a spin: no core is burnt). The lead is what
getting the GIL has recently taken (``QUANTILE`` of the last ``WINDOW``
wake-ups, at most ``LEAD_MAX_MS``), so a quiet node leads by a fraction of a
millisecond and a contended one by a few. One pass:

    lead = 0 if leading is off, unknown yet or the hold budget is spent
    the top is due                     -> take it
    the top is due within lead         -> sleep to it holding the GIL (the
                                          dispatcher has the GIL now: the
                                          pass before ended inside the lead)
    otherwise wait until top - lead; the wait ends:
      a push brought an earlier top    -> look again
      timed out, resumed at r          -> record r - (top - lead); look again
                                          (the top is now due within lead)
    take what is due, start it

What it costs: the other threads cannot run Python while the dispatcher
holds the GIL, so holds are rationed (``HoldBudget``: at most ``HOLD_SHARE``
of the time, at most ``HOLD_BURST_S`` saved up). Beside the 4x flood of
``bench fairness`` the holds took 15 to 20% of the time, against 2% on a
quiet node. A node with no ``clock_nanosleep`` (not Linux), or started with
``--start-lead-max-ms 0``, never holds.
"""

from __future__ import annotations

import ctypes
import errno
import time
from collections import deque
from collections.abc import Callable, Sequence

from shardcron import metrics

LEAD_MAX_MS = 5.0  # never lead by more: a longer hold starves the other threads
QUANTILE = 0.95  # lead by what getting the GIL took on all but the slowest 5% of recent wake-ups
WINDOW = 200  # wake-ups remembered
MIN_SAMPLES = 20  # no lead before this many wake-ups are known
RECOMPUTE_EVERY = 25  # wake-ups between two computations of the lead
HOLD_SHARE = 0.25  # holds take at most this share of the time...
HOLD_BURST_S = 0.1  # ...and at most this much in a row of holds


def lead_for(
    delays_ms: Sequence[float], quantile: float = QUANTILE, max_ms: float = LEAD_MAX_MS, min_samples: int = MIN_SAMPLES
) -> float:
    """The lead (ms) for these recent wake-up delays: their ``quantile``, within [0, ``max_ms``]."""
    if len(delays_ms) < min_samples:
        return 0.0
    ordered = sorted(delays_ms)
    q = ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]
    return min(max_ms, max(0.0, q))


class HoldBudget:
    """A token bucket of hold time: ``share`` of each second, at most ``burst_s`` saved up."""

    def __init__(
        self, share: float = HOLD_SHARE, burst_s: float = HOLD_BURST_S, now: Callable[[], float] = time.monotonic
    ):
        self._share = share
        self._burst_s = burst_s
        self._now = now
        self._tokens = burst_s
        self._at = now()

    def allows(self) -> bool:
        t = self._now()
        self._tokens = min(self._burst_s, self._tokens + (t - self._at) * self._share)
        self._at = t
        return self._tokens > 0

    def charge(self, held_s: float) -> None:
        self._tokens -= held_s


class StartLead:
    """The dispatcher's lead: fed each wake-up's delay in getting the GIL back (one thread uses it)."""

    def __init__(self, max_ms: float = LEAD_MAX_MS):
        self._max_ms = max_ms if HOLD_AVAILABLE else 0.0
        self._delays: deque[float] = deque(maxlen=WINDOW)
        self._since = 0
        self._lead_ms = 0.0
        self.budget = HoldBudget()

    def lead_ms(self) -> float:
        """How early to aim now: 0 when leading is off or the hold budget is spent."""
        return self._lead_ms if self._lead_ms and self.budget.allows() else 0.0

    def observe(self, delay_ms: float) -> None:
        self._delays.append(delay_ms)
        self._since += 1
        if self._since >= RECOMPUTE_EVERY and self._max_ms:
            self._since = 0
            self._lead_ms = lead_for(self._delays, max_ms=self._max_ms)
            metrics.start_lead.set(self._lead_ms / 1000.0)

    def hold_until(self, monotonic_s: float) -> None:
        """Sleep until ``monotonic_s`` keeping the GIL, and charge the budget with it."""
        started = time.monotonic()
        if started < monotonic_s:
            _sleep_holding_gil(monotonic_s)
            held = time.monotonic() - started
            self.budget.charge(held)
            metrics.start_lead_held.inc(held)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_CLOCK_MONOTONIC = 1  # time.monotonic()'s clock on Linux
_TIMER_ABSTIME = 1


def _load_clock_nanosleep():
    try:
        fn = ctypes.PyDLL(None).clock_nanosleep  # PyDLL: the call keeps the GIL (CDLL would release it)
    except (AttributeError, OSError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec), ctypes.c_void_p)
    fn.restype = ctypes.c_int
    return fn


_clock_nanosleep = _load_clock_nanosleep()
HOLD_AVAILABLE = (
    _clock_nanosleep is not None and time.get_clock_info("monotonic").implementation == "clock_gettime(CLOCK_MONOTONIC)"
)


def _sleep_holding_gil(monotonic_s: float) -> None:
    whole = int(monotonic_s)
    until = _Timespec(whole, int((monotonic_s - whole) * 1e9))
    while _clock_nanosleep(_CLOCK_MONOTONIC, _TIMER_ABSTIME, ctypes.byref(until), None) == errno.EINTR:
        pass  # a signal: the deadline is absolute, sleep on to it


__all__ = ["HOLD_AVAILABLE", "HoldBudget", "LEAD_MAX_MS", "StartLead", "lead_for"]
