"""The dispatcher's lead (leader/gil_lead.py): how early it aims, its budget, the hold, the heap's wait."""

from __future__ import annotations

import argparse
import threading
import time

import pytest

from shardcron.cli.flags import add_node_flags, node_config_from_args
from shardcron.clock import wall_ms_exact
from shardcron.errors import ConfigError
from shardcron.leader.gil_lead import HOLD_AVAILABLE, HoldBudget, StartLead, lead_for
from shardcron.leader.heap import DispatchDue, TimerHeap
from shardcron.model import SlotRef
from shardcron.rules.takeover import Dispatch


@pytest.mark.parametrize(
    "delays, max_ms, expected",
    [
        ([], 5.0, 0.0),  # nothing known: no lead
        ([1.0] * 19, 5.0, 0.0),  # fewer than MIN_SAMPLES
        ([1.0] * 20, 5.0, 1.0),
        ([0.1] * 95 + [9.0] * 5, 5.0, 5.0),  # the slowest 5% set the 95th percentile: capped at max
        ([0.1] * 96 + [9.0] * 4, 5.0, 0.1),  # fewer than 5% slow: they are left to be late
        ([float(i) / 10 for i in range(100)], 10.0, 9.5),  # the 95th of 100: the 96th smallest
        ([-0.5] * 30, 5.0, 0.0),  # never negative
        ([2.0] * 30, 0.0, 0.0),  # max 0: off
    ],
)
def test_lead_is_a_high_quantile_of_recent_delays_within_bounds(delays, max_ms, expected):
    assert lead_for(delays, max_ms=max_ms) == pytest.approx(expected)


class FakeMonotonic:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_hold_budget_refills_at_its_share_and_saves_up_at_most_its_burst():
    now = FakeMonotonic()
    budget = HoldBudget(share=0.25, burst_s=0.1, now=now)
    assert budget.allows()
    budget.charge(0.1)
    assert not budget.allows(), "the burst is spent"
    now.t += 0.2  # a fifth of a second at a quarter: 0.05 s of holds
    assert budget.allows()
    budget.charge(0.06)
    assert not budget.allows()
    now.t += 3600  # an idle hour saves up no more than the burst
    assert budget.allows()
    budget.charge(0.1)
    assert not budget.allows()


def test_the_lead_follows_the_delays_observed_and_is_zero_while_the_budget_is_spent():
    lead = StartLead(max_ms=5.0)
    assert lead.lead_ms() == 0.0
    for _ in range(50):
        lead.observe(2.0)
    assert lead.lead_ms() == pytest.approx(2.0)
    lead.budget.charge(1.0)
    assert lead.lead_ms() == 0.0, "no lead while holds have taken more than their share"
    off = StartLead(max_ms=0.0)
    for _ in range(50):
        off.observe(2.0)
    assert off.lead_ms() == 0.0


def test_a_hold_keeps_the_gil_so_no_other_thread_runs_python_meanwhile():
    assert HOLD_AVAILABLE, "Linux has clock_nanosleep: the lead must be available here"
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    lead = StartLead()
    released, held = [], []
    try:
        # Five of each: on a loaded machine one try may lose the CPU (or the GIL, just before the hold
        # takes it) for part of its 0.2 s; the best of five says what the hold does.
        for _ in range(5):
            before = count[0]
            time.sleep(0.2)  # the GIL released: the other thread counts
            released.append(count[0] - before)
            before = count[0]
            lead.hold_until(time.monotonic() + 0.2)
            held.append(count[0] - before)
    finally:
        stop.set()
        t.join()
    assert max(released) > 1000, f"the other thread should have run while the GIL was free (counted {released})"
    assert min(held) < max(released) / 20, f"the other thread counted {held} during holds, {released} in sleeps"


def _entry(due_ms: int) -> DispatchDue:
    return DispatchDue(due_ms, 0, 1, Dispatch(SlotRef("j", due_ms), 1))


def test_wait_near_returns_a_due_top_at_once_and_takes_nothing():
    heap = TimerHeap()
    now = wall_ms_exact()
    heap.push_many([_entry(int(now) - 5)])
    assert heap.wait_near(wall_ms_exact, 0.0, lambda: False, 1.0) == (int(now) - 5, None, False)
    assert heap.next_due_ms() == int(now) - 5, "nothing was taken"


def test_wait_near_returns_a_top_within_the_lead_at_once_for_the_caller_to_hold():
    heap = TimerHeap()
    top = int(wall_ms_exact()) + 2000
    heap.push_many([_entry(top)])
    assert heap.wait_near(wall_ms_exact, 5000.0, lambda: False, 1.0) == (top, None, True)


def test_wait_near_aims_lead_early_then_returns_before_the_top():
    heap = TimerHeap()
    top = int(wall_ms_exact()) + 300
    heap.push_many([_entry(top)])
    got = heap.wait_near(wall_ms_exact, 200.0, lambda: False, 5.0)
    returned_at = wall_ms_exact()
    assert got == (top, top - 200.0, True)
    assert returned_at >= top - 200.0, "it waited for the aim"


def test_wait_near_without_a_lead_waits_for_the_top_itself():
    heap = TimerHeap()
    top = int(wall_ms_exact()) + 50
    heap.push_many([_entry(top)])
    got = heap.wait_near(wall_ms_exact, 0.0, lambda: False, 5.0)
    assert got == (top, float(top), False)
    assert wall_ms_exact() >= top


def test_wait_near_gives_up_after_idle_and_when_closing():
    heap = TimerHeap()
    assert heap.wait_near(wall_ms_exact, 1.0, lambda: False, 0.05) is None
    heap.push_many([_entry(int(wall_ms_exact()) + 60_000)])
    assert heap.wait_near(wall_ms_exact, 1.0, lambda: True, 5.0) is None


def node_settings(*argv: str):
    p = argparse.ArgumentParser()
    add_node_flags(p)
    return node_config_from_args(p.parse_args(list(argv)))


def test_the_start_lead_flag_defaults_to_5_ms_and_takes_0_to_turn_it_off(monkeypatch):
    assert node_settings().start_lead_max_ms == 5.0
    assert node_settings("--start-lead-max-ms", "0").start_lead_max_ms == 0.0
    monkeypatch.setenv("SHARDCRON_START_LEAD_MAX_MS", "2.5")
    assert node_settings().start_lead_max_ms == 2.5


@pytest.mark.parametrize(
    "value, says",
    [
        ("-1", "--start-lead-max-ms: must be at least 0.0, got -1.0"),
        ("25", "--start-lead-max-ms: must be at most 20.0, got 25.0"),
        ("nan", "--start-lead-max-ms: must be at most 20.0, got nan"),
        ("soon", "--start-lead-max-ms: expected a number, got 'soon'"),
    ],
)
def test_a_bad_start_lead_is_named(value, says):
    with pytest.raises(ConfigError) as err:
        node_settings("--start-lead-max-ms", value)
    assert str(err.value) == says
