"""A shard's cancel is an event set by the shard's stop or the session's loss, and it lets go of both once set."""

from __future__ import annotations

import pytest

from shardcron.leader.shard_cancel import StopOrLeaseLost
from shardcron.runtime.latch import Latch


class _Lease:
    """What a shard's cancel reads of a session: ``done``, and whether the clock still proves the lease."""

    def __init__(self, provable: bool = True):
        self.done = Latch()
        self.provable = provable

    def can_act(self) -> bool:
        return self.provable and not self.done.is_set()


@pytest.mark.parametrize(
    "before, after, provable, is_set, heard",
    [
        # set before it is made, set after it is made, lease provable, is_set(), its listeners heard it
        ([], [], True, False, False),
        ([], ["stop"], True, True, True),
        ([], ["done"], True, True, True),
        ([], ["stop", "done"], True, True, True),
        (["stop"], [], True, True, True),  # made for a shard already stopped
        (["done"], [], True, True, True),  # made on a session already lost
        # The deadline has passed on the clock before the session's thread said so (a pause): a start
        # is refused (is_set), but no waiter is woken by the clock; the session's own event does that.
        ([], [], False, True, False),
    ],
)
def test_set_by_the_stop_or_the_session(before, after, provable, is_set, heard):
    lease, stop = _Lease(provable), Latch()
    sources = {"stop": stop, "done": lease.done}
    for name in before:
        sources[name].set()
    cancel = StopOrLeaseLost(stop, lease)
    got = []
    cancel.on_set(lambda: got.append("heard"))
    for name in after:
        sources[name].set()
    assert cancel.is_set() is is_set
    assert bool(got) is heard
    assert cancel.wait(0) is is_set
    if heard:
        # Once set it holds nothing on either source: the session outlives the leadership.
        assert (stop.listeners, lease.done.listeners) == (0, 0)
    else:
        assert (stop.listeners, lease.done.listeners) == (1, 1)


def test_leaderships_that_end_leave_nothing_on_the_session():
    lease = _Lease()
    for _ in range(100):
        stop = Latch()
        StopOrLeaseLost(stop, lease)
        stop.set()  # the leadership ends: the ownership state machine sets its stop latch
    assert lease.done.listeners == 0


def test_a_waiter_that_takes_its_callback_back_leaves_nothing_behind():
    cancel = StopOrLeaseLost(Latch(), _Lease())
    for _ in range(100):
        take_back = cancel.on_set(lambda: None)
        take_back()  # as every tick does when it ends
    assert cancel.listeners == 0
