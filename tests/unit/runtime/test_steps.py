"""A worker's steps: when one has stalled (a table), and how nested steps restart the clock."""

from __future__ import annotations

import pytest

from shardcron.runtime.steps import Step, StepWatch, WorkerStalled, stalled

BUDGET = 30.0


@pytest.mark.parametrize(
    ("started_at", "now", "budget_s", "expected"),
    [
        (None, 1_000.0, BUDGET, False),  # idle, waiting for work: never a stall
        (None, 0.0, 0.0, False),
        (100.0, 100.0, BUDGET, False),  # just begun
        (100.0, 129.9, BUDGET, False),  # within its budget
        (100.0, 130.0, BUDGET, False),  # at its budget exactly: not past it yet
        (100.0, 130.1, BUDGET, True),  # past it
        (100.0, 10_000.0, BUDGET, True),  # stuck for hours
        (100.0, 99.0, BUDGET, False),  # began after the watcher read its clock
        (100.0, 100.5, 0.0, True),  # no budget: any time at all in a step is too long
    ],
)
def test_a_step_has_stalled_only_once_it_has_lasted_past_its_budget(started_at, now, budget_s, expected):
    assert stalled(started_at, now, budget_s) is expected


class FakeClock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(1_000.0)


def test_a_watch_is_idle_outside_steps_and_names_the_step_it_is_in(fake_clock):
    watch = StepWatch(fake_clock.monotonic)
    assert watch.current is None
    with watch.step("shard 3: acquire"):
        assert watch.current == Step("shard 3: acquire", 1_000.0)
    assert watch.current is None


def test_a_step_that_ends_restarts_the_clock_of_the_step_it_was_in(fake_clock):
    """A pass over every shard is judged by the longest stretch between its actions, not by its total."""
    watch = StepWatch(fake_clock.monotonic)
    with watch.step("deciding every shard's next action"):
        for shard in range(3):
            fake_clock.now += 20.0  # each action takes 20 s: 60 s in all, past a 30 s budget
            with watch.step(f"shard {shard}: acquire"):
                fake_clock.now += 20.0
                assert watch.stall("coordinator", fake_clock.now, BUDGET) is None
        assert watch.current == Step("deciding every shard's next action", fake_clock.now)
        fake_clock.now += 20.0
        assert watch.stall("coordinator", fake_clock.now, BUDGET) is None
    assert watch.current is None


def test_a_step_left_by_a_raise_is_ended_too(fake_clock):
    watch = StepWatch(fake_clock.monotonic)
    with pytest.raises(ValueError), watch.step("reading the cluster"):
        raise ValueError("etcd did not answer")
    assert watch.current is None


def test_a_stall_names_the_worker_the_step_and_how_long_it_lasted(fake_clock):
    watch = StepWatch(fake_clock.monotonic)
    with watch.step("shard 3: acquire"):
        fake_clock.now += 31.0
        stall = watch.stall("coordinator", fake_clock.now, BUDGET)
    assert isinstance(stall, WorkerStalled)
    assert stall.step.what == "shard 3: acquire" and stall.lasted_s == 31.0 and stall.budget_s == BUDGET
    assert str(stall) == "the coordinator has been in one step (shard 3: acquire) for 31s, past its budget of 30s"
