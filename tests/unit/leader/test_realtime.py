"""``make_realtime`` (leader/realtime.py): SCHED_FIFO at priority 1, and a clear error when refused."""

from __future__ import annotations

import errno
import os

import pytest

from shardcron.errors import ConfigError
from shardcron.leader.realtime import REALTIME_PRIORITY, make_realtime


def test_the_thread_goes_under_sched_fifo_at_the_lowest_realtime_priority():
    calls = []
    make_realtime(4242, lambda tid, policy, param: calls.append((tid, policy, param.sched_priority)))
    assert calls == [(4242, os.SCHED_FIFO, REALTIME_PRIORITY)] and REALTIME_PRIORITY == 1


@pytest.mark.parametrize(
    "error, says",
    [
        (PermissionError(errno.EPERM, "Operation not permitted"), "needs CAP_SYS_NICE"),
        (OSError(errno.EINVAL, "Invalid argument"), "SCHED_FIFO refused (Invalid argument)"),
    ],
)
def test_a_refusal_is_a_config_error_that_says_why(error, says):
    def refuse(*_):
        raise error

    with pytest.raises(ConfigError, match="--dispatcher-priority realtime") as e:
        make_realtime(1, refuse)
    assert says in str(e.value)
