"""The settle window, one row per case: hold inside the window, follow the members once they are quiet."""

import pytest

from shardcron.coordination.settle import Settle, settle

A, AB, ABC = ("a",), ("a", "b"), ("a", "b", "c")
W = 1.0


@pytest.mark.parametrize(
    "now, members, previous, expected",
    [
        # a fresh node: no placement during its first window, then the members it sees
        (10.0, A, Settle(), Settle(A, 10.0, None)),
        (10.5, A, Settle(A, 10.0, None), Settle(A, 10.0, None)),
        (11.0, A, Settle(A, 10.0, None), Settle(A, None, A)),
        # settled, nothing changes: the same placement, no window
        (20.0, AB, Settle(AB, None, AB), Settle(AB, None, AB)),
        # a join opens the window; the old member set is kept until it closes
        (20.0, ABC, Settle(AB, None, AB), Settle(ABC, 20.0, AB)),
        (20.9, ABC, Settle(ABC, 20.0, AB), Settle(ABC, 20.0, AB)),
        (21.0, ABC, Settle(ABC, 20.0, AB), Settle(ABC, None, ABC)),
        # a second change inside the window restarts it
        (20.5, ABC, Settle(AB, 20.0, A), Settle(ABC, 20.5, A)),
        # a quick restart (leave, come back) inside the window: the placement never changed
        (30.0, AB, Settle(ABC, None, ABC), Settle(AB, 30.0, ABC)),
        (30.4, ABC, Settle(AB, 30.0, ABC), Settle(ABC, 30.4, ABC)),
        (31.4, ABC, Settle(ABC, 30.4, ABC), Settle(ABC, None, ABC)),
        # no window at all (--settle 0): follow at once
        (5.0, AB, Settle(A, None, A), Settle(AB, None, AB)),
    ],
)
def test_settle(now, members, previous, expected):
    window = 0.0 if now == 5.0 else W
    assert settle(now, members, previous, window) == expected


def test_wake_at_is_the_end_of_the_open_window():
    assert Settle(AB, 20.0, A).wake_at(1.5) == 21.5
    assert Settle(AB, None, AB).wake_at(1.5) is None
