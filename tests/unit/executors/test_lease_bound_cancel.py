"""An executor's cancel covers the lease as well as the shard, and work queued on the loop checks it before starting."""

from __future__ import annotations

import pytest

from shardcron.executors.aio import Cancelled, LoopThread
from shardcron.leader.shard_cancel import StopOrLeaseLost
from shardcron.runtime.latch import Latch


class _Lease:
    """A lease held, or not, on the clock (``can_act``), whose ``done`` a test sets."""

    def __init__(self, held: bool):
        self.held = held
        self.done = Latch()

    def can_act(self) -> bool:
        return self.held and not self.done.is_set()


@pytest.mark.parametrize(
    "stopped, lease_held, cancelled",
    [
        (False, True, False),
        (True, True, True),  # the shard was lost
        (False, False, True),  # the lease can no longer be proven (a pause, a partition)
        (True, False, True),
    ],
)
def test_cancel_is_the_shard_or_the_lease(stopped, lease_held, cancelled):
    stop = Latch()
    if stopped:
        stop.set()
    cancel = StopOrLeaseLost(stop, _Lease(lease_held))
    assert cancel.is_set() is cancelled
    assert cancel.wait(0.01) is cancelled


def test_a_coroutine_whose_cancel_is_set_by_the_time_the_loop_takes_it_never_starts():
    loop = LoopThread("test-loop")
    started = []

    async def work():
        started.append(True)
        return "ran"

    try:
        assert loop.run(work, 5, StopOrLeaseLost(Latch(), _Lease(True))) == "ran"
        started.clear()
        with pytest.raises(Cancelled):
            loop.run(work, 5, StopOrLeaseLost(Latch(), _Lease(False)))
        assert started == []
    finally:
        loop.close()
