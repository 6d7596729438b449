"""``decide``: one row per arrow of the shard state machine (ownership.py's docstring), plus the edges.

Each row: (state, role, queue in election order, preferred primary, stopping, primary busy) -> action.
"me" is this node; "p" the balancer's preferred primary, "s" a standby, "x" anyone else.
"""

import logging

import pytest

from shardcron.coordination.ownership import Action, Role, ShardSlot, ShardState, decide, role_of

# One letter per state keeps the tables below readable.
I, C, L, R, X = ShardState.IDLE, ShardState.CANDIDATE, ShardState.LEADER, ShardState.RESIGNING, ShardState.LOST  # noqa: E741
P, S, N = Role.PRIMARY, Role.STANDBY, Role.NONE


@pytest.mark.parametrize(
    "state, role, queue, primary, stopping, busy, expected",
    [
        # IDLE -> CANDIDATE: CAMPAIGN when the balancer picks us, as primary or standby
        (I, P, [], "me", False, False, Action.CAMPAIGN),
        (I, S, ["p"], "p", False, False, Action.CAMPAIGN),
        (I, S, ["x"], "p", False, False, Action.CAMPAIGN),  # behind whoever leads now
        (I, S, [], "p", False, False, Action.NOTHING),  # never in front of a primary that has not campaigned yet
        (I, N, ["p"], "p", False, False, Action.NOTHING),
        # CANDIDATE -> IDLE: WITHDRAW when the balancer no longer picks us ...
        (C, N, ["p", "me"], "p", False, False, Action.WITHDRAW),
        # ... or when the node stops
        (C, S, ["p", "me"], "p", True, False, Action.WITHDRAW),
        # CANDIDATE -> CANDIDATE: REQUEUE, we are ahead of the preferred owner without leading
        (C, S, ["x", "me", "p"], "p", False, False, Action.REQUEUE),
        (C, S, ["me", "p"], "p", False, False, Action.REQUEUE),  # at the head, the primary queued behind
        # CANDIDATE -> LEADER: ACQUIRE at the head (the coordinator proves it in etcd first)
        (C, P, ["me"], "me", False, False, Action.ACQUIRE),
        (C, P, ["me", "s"], "me", False, False, Action.ACQUIRE),
        (C, S, ["me"], "p", False, False, Action.ACQUIRE),  # the primary is not queued: a standby takes over
        (C, P, ["x", "me"], "me", False, False, Action.NOTHING),  # still behind an older key
        (C, S, ["p", "me"], "p", False, False, Action.NOTHING),  # behind the primary, as a standby should be
        # LEADER -> RESIGNING: RESIGN when the preferred owner is next in line ...
        (L, S, ["me", "p"], "p", False, False, Action.RESIGN),
        (L, N, ["me", "p", "s"], "p", False, False, Action.RESIGN),
        # ... but not while it is still readying other shards it was handed (paced hand-over)
        (L, S, ["me", "p"], "p", False, True, Action.NOTHING),
        # ... and not before it is next in line: the shard would be left without a leader
        (L, S, ["me", "s", "p"], "p", False, False, Action.NOTHING),
        (L, S, ["me"], "p", False, False, Action.NOTHING),
        # the preferred owner leads: nothing to do, whoever is queued
        (L, P, ["me", "s"], "me", False, False, Action.NOTHING),
        (L, P, ["me", "s"], "me", False, True, Action.NOTHING),
        # LEADER -> RESIGNING on a drain or shutdown (stopping), busy or not
        (L, P, ["me", "s"], "me", True, False, Action.RESIGN),
        (L, P, ["me"], "me", True, True, Action.RESIGN),
        # stopping: nothing new is started
        (I, P, [], "me", True, False, Action.NOTHING),
        # RESIGNING waits for its drain; LOST is terminal for the session
        (R, P, ["me", "p"], "me", False, False, Action.NOTHING),
        (R, S, ["me", "p"], "p", True, False, Action.NOTHING),
        (X, P, [], "me", False, False, Action.NOTHING),
        (X, P, ["me"], "me", True, False, Action.NOTHING),
        # our key is not in the mirror yet (campaign just written, the watch not delivered)
        (C, P, [], "me", False, False, Action.NOTHING),
        (C, S, ["p"], "p", False, False, Action.NOTHING),
        # no placement at all (a fresh node inside its first settle window)
        (I, N, [], None, False, False, Action.NOTHING),
        (C, N, ["me"], None, False, False, Action.WITHDRAW),
    ],
)
def test_decide(state, role, queue, primary, stopping, busy, expected):
    assert decide(state, role, "me", queue, primary, stopping, primary_busy=busy) is expected


@pytest.mark.parametrize(
    "primary, standby, expected",
    [
        ("me", "s", Role.PRIMARY),
        ("p", "me", Role.STANDBY),
        ("p", "s", Role.NONE),
        ("p", None, Role.NONE),
    ],
)
def test_role_of(primary, standby, expected):
    assert role_of("me", primary, standby) is expected


def test_set_state_changes_the_state_and_ignores_a_repeat(caplog):
    caplog.set_level(logging.INFO, logger="shardcron.coordination.ownership")
    slot = ShardSlot(3)
    slot.set_state(ShardState.CANDIDATE, "campaigning")
    slot.set_state(ShardState.CANDIDATE, "again")
    assert slot.state is ShardState.CANDIDATE
    assert sum("idle -> candidate" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    "path, stopped",
    [
        # The states a slot goes through, in order                       its stop latch set at the end
        ([ShardState.CANDIDATE], False),
        ([ShardState.CANDIDATE, ShardState.LEADER], False),
        ([ShardState.CANDIDATE, ShardState.LEADER, ShardState.RESIGNING], False),  # draining: ticks still run
        ([ShardState.CANDIDATE, ShardState.LEADER, ShardState.RESIGNING, ShardState.IDLE], True),
        ([ShardState.CANDIDATE, ShardState.LEADER, ShardState.IDLE], True),  # the election was lost
        ([ShardState.CANDIDATE, ShardState.LEADER, ShardState.LOST], True),  # the session was lost
        ([ShardState.CANDIDATE, ShardState.IDLE], True),
        ([ShardState.IDLE], True),  # a repeat of the state it is in still signals: nothing may run on it
    ],
)
def test_set_state_sets_the_stop_latch_when_the_slot_leaves_its_work(path, stopped):
    slot = ShardSlot(3)
    for state in path:
        slot.set_state(state, "test")
    assert slot.stop.is_set() is stopped
