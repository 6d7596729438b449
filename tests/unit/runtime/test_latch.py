"""A latch is set once, calls back every listener once, and keeps no listener that was taken back."""

from __future__ import annotations

import logging
import threading

import pytest

from shardcron.runtime.latch import Latch


@pytest.mark.parametrize(
    "steps, heard, listeners",
    [
        # What happens, in order                        who heard it   listeners left
        (["register a", "set"], ["a"], 0),
        (["register a", "register b", "set"], ["a", "b"], 0),  # in the order they came
        (["register a", "take back a", "set"], [], 0),
        (["register a", "register b", "take back a"], [], 1),
        (["register a", "register b", "take back a", "set"], ["b"], 0),
        (["set", "register a"], ["a"], 0),  # registered on a set latch: at once
        (["register a", "set", "set"], ["a"], 0),  # a second set is a no-op
        (["register a", "set", "take back a", "register b"], ["a", "b"], 0),  # taking back a run one: harmless
    ],
)
def test_listeners(steps, heard, listeners):
    latch = Latch()
    got: list[str] = []
    take_back = {}
    for step in steps:
        verb, _, name = step.rpartition(" ")
        if step == "set":
            latch.set()
        elif verb == "register":
            take_back[name] = latch.on_set(lambda name=name: got.append(name))
        elif verb == "take back":
            take_back[name]()
    assert got == heard
    assert latch.listeners == listeners


def test_a_listener_that_raises_does_not_keep_the_others_from_hearing(caplog):
    latch = Latch()
    got = []

    def boom():
        raise RuntimeError("boom")

    latch.on_set(boom)
    latch.on_set(lambda: got.append("after"))
    with caplog.at_level(logging.ERROR, logger="shardcron.runtime.latch"):
        latch.set()
    assert got == ["after"] and latch.is_set()
    assert "a latch callback failed" in caplog.text


def test_it_is_an_event_that_wakes_its_waiters_and_is_never_cleared():
    latch = Latch()
    woke = threading.Event()
    waiter = threading.Thread(target=lambda: latch.wait(60) and woke.set())
    waiter.start()
    latch.set()
    waiter.join(60)
    assert woke.is_set() and latch.wait(0)
    with pytest.raises(RuntimeError):
        latch.clear()
    assert latch.is_set()


def test_a_callback_may_take_itself_and_others_back_and_set_other_latches():
    first, second = Latch(), Latch()
    got = []
    take_back_b = None

    def a():
        got.append("a")
        assert take_back_b is not None
        take_back_b()  # too late for this round: b was taken with a when the latch was set
        second.set()

    first.on_set(a)
    take_back_b = first.on_set(lambda: got.append("b"))
    second.on_set(lambda: got.append("second"))
    first.set()
    assert got == ["a", "second", "b"]
    assert first.listeners == second.listeners == 0
