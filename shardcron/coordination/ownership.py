"""The shard ownership state machine, and the pure rule that drives it.

States of one shard, as this node sees its own part in it:

    IDLE       not a candidate
    CANDIDATE  our key is queued under <prefix>/shard/<k>/
    LEADER     we lead: the fence is raised in the store and the shard's jobs run here
    RESIGNING  we stopped claiming and wait (bounded) for running ticks before deleting our key
    LOST       the session is gone; terminal for this session

State transitions (and their causes):

    IDLE      -> CANDIDATE   CAMPAIGN: the balancer picks us as the shard's primary, or as its
                             standby once someone is queued (a standby stands behind, not in front)
    CANDIDATE -> IDLE        WITHDRAW: the balancer no longer picks us; or the node stops
    CANDIDATE -> CANDIDATE   REQUEUE: we are queued ahead of the preferred owner without
                             leading; we go to the back so it is next in line
    CANDIDATE -> LEADER      ACQUIRE: no older key is left (checked in etcd) and the fence is raised
    CANDIDATE -> IDLE        ACQUIRE failed: the store holds a newer fence, our key is stale
    LEADER    -> RESIGNING   RESIGN: the preferred owner is next in line (and is not still
                             readying MAX_TAKEOVERS_IN_FLIGHT other shards), a drain, or shutdown
    LEADER    -> RESIGNING   a fenced write was rejected: a newer leader exists
    RESIGNING -> IDLE        running ticks are done (or the grace ran out); our key is deleted
    CANDIDATE | LEADER -> IDLE   our key disappeared from etcd (deleted by someone else), or
                             etcd refused the proclaim of a just-won shard: the election is lost
    any       -> LOST        the session was lost: every shard at once, by event

Every change goes through ``ShardSlot.set_state``, which logs it and signals it:
entering IDLE or LOST sets the slot's ``stop`` latch, the event the shard's
work waits on (``leader.shard_cancel.StopOrLeaseLost`` derives each tick's
cancel from it and from the session's ``done``). A leadership gets a fresh
latch when it is taken (``ShardActions.acquire``) and a session a fresh one
per slot; two things set it outside the setter, both only ever earlier than
the setter would: the session-lost callback (on the keep-alive thread, before
the control thread gets to LOST) and a release whose grace ran out (the
running ticks are cancelled while the slot is still RESIGNING).
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import TYPE_CHECKING

from shardcron.runtime.latch import Latch

if TYPE_CHECKING:
    from shardcron.coordination.election import Election

log = logging.getLogger(__name__)


class ShardState(Enum):
    IDLE = "idle"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNING = "resigning"
    LOST = "lost"


class Role(Enum):
    PRIMARY = "primary"
    STANDBY = "standby"
    NONE = "none"


class Action(Enum):
    NOTHING = "nothing"
    CAMPAIGN = "campaign"
    WITHDRAW = "withdraw"
    REQUEUE = "requeue"
    ACQUIRE = "acquire"
    RESIGN = "resign"


def decide(
    state: ShardState,
    role: Role,
    me: str,
    queue: list[str],
    primary: str | None,
    stopping: bool,
    primary_busy: bool = False,
) -> Action:
    """What this node should do next for one shard. Pure.

    ``queue`` is the shard's candidates' node ids in election order (the first
    leads); ``primary`` is the node the balancer prefers as leader;
    ``primary_busy`` says that node is still readying other shards it was
    handed, so a voluntary hand-over waits (the shard keeps its leader meanwhile).
    """
    if state in (ShardState.RESIGNING, ShardState.LOST):
        return Action.NOTHING
    if stopping:
        return {ShardState.LEADER: Action.RESIGN, ShardState.CANDIDATE: Action.WITHDRAW}.get(state, Action.NOTHING)
    if state is ShardState.IDLE:
        if role is Role.STANDBY and not queue:
            # An empty queue means the primary has not campaigned yet (a cold start, a
            # reshard's cut-over): a standby queued first would win the shard, keep it
            # (the balancer is sticky) and reshuffle the others. A dead primary's
            # members key goes with its lease, so the next placement names a live one.
            return Action.NOTHING
        return Action.CAMPAIGN if role is not Role.NONE else Action.NOTHING
    pos = queue.index(me) if me in queue else None
    primary_pos = queue.index(primary) if primary in queue and primary != me else None
    if state is ShardState.LEADER:
        # Hand over only when the preferred owner is next in line, so the shard
        # moves once, straight to it, and is never left without a leader.
        hand_over = role is not Role.PRIMARY and primary_pos == 1
        return Action.RESIGN if hand_over and not primary_busy else Action.NOTHING
    # CANDIDATE
    if role is Role.NONE:
        return Action.WITHDRAW
    if pos is None:
        return Action.NOTHING  # our key is not in the mirror yet
    if primary_pos is not None and primary_pos > pos:
        return Action.REQUEUE
    return Action.ACQUIRE if pos == 0 else Action.NOTHING


def role_of(me: str, primary: str | None, standby: str | None) -> Role:
    if me == primary:
        return Role.PRIMARY
    if me == standby:
        return Role.STANDBY
    return Role.NONE


class ShardSlot:
    """This node's part in one shard: its state, its election, and the event that stops its work."""

    def __init__(self, shard: int):
        self.shard = shard
        self.state = ShardState.IDLE
        self.election: Election | None = None  # while campaigning
        self.fence = 0
        self.stop = Latch()  # set when work on this shard must stop, at once

    def set_state(self, new: ShardState, why: str) -> None:
        if new in (ShardState.IDLE, ShardState.LOST):
            self.stop.set()  # no work of this slot may go on past here; a no-op when it was set already
        if new is self.state:
            return
        log.info(
            "shard %d: %s -> %s (%s)",
            self.shard,
            self.state.value,
            new.value,
            why,
            extra={"shard": self.shard, "fence": self.fence},
        )
        self.state = new
