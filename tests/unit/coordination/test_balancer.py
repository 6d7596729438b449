"""The balancer's promises, as properties (hypothesis) over shard counts, member sets and current owners."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.coordination.balancer import Owner, Placement, assign, caps, fair_share

NAMES = [f"n{i}" for i in range(12)] + ["bench-0", "bench-1", "node-a", "node-b"]

shard_counts = st.integers(min_value=1, max_value=300)
member_sets = st.lists(st.sampled_from(NAMES), min_size=1, max_size=12, unique=True)


@st.composite
def owners(draw, shard_count: int, nodes: list[str]) -> dict[int, Owner]:
    """Any current state: some shards held by members, some by strangers (drained, gone), some by nobody."""
    holders = st.sampled_from([*nodes, "stranger"])
    shards = draw(st.lists(st.integers(0, shard_count - 1), unique=True, max_size=shard_count))
    revs = draw(st.lists(st.integers(1, 10_000), min_size=len(shards), max_size=len(shards), unique=True))
    return {s: Owner(draw(holders), r) for s, r in zip(shards, revs, strict=True)}


@st.composite
def clusters(draw):
    n = draw(shard_counts)
    nodes = draw(member_sets)
    return n, nodes, draw(owners(n, nodes))


_revisions = itertools.count(1_000_000)


def carry_out(n: int, nodes: list[str], current: dict[int, Owner]) -> dict[int, Owner]:
    """The state once the plan is done: moved shards are won by their primary under a new revision."""
    plan = assign(n, nodes, current)
    out = {}
    for s in range(n):
        o = current.get(s)
        out[s] = o if o and o.node == plan[s].primary else Owner(plan[s].primary, next(_revisions))
    return out


def primaries(plan: dict[int, Placement]) -> dict[int, str]:
    return {s: p.primary for s, p in plan.items()}


def counts(plan: dict[int, Placement], nodes: list[str]) -> dict[str, int]:
    return {m: sum(1 for p in plan.values() if p.primary == m) for m in nodes}


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_every_node_lands_within_its_fair_share(cluster):
    n, nodes, current = cluster
    plan = assign(n, nodes, current)
    lo, hi = fair_share(n, len(nodes))
    assert sorted(plan) == list(range(n))
    assert all(lo <= c <= hi for c in counts(plan, nodes).values()), counts(plan, nodes)


@settings(max_examples=100, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_the_result_is_deterministic_whatever_the_order_of_the_inputs(cluster, rnd):
    n, nodes, current = cluster
    shuffled_nodes = list(nodes) * 2
    rnd.shuffle(shuffled_nodes)
    items = list(current.items())
    rnd.shuffle(items)
    assert assign(n, nodes, current) == assign(n, shuffled_nodes, dict(items)) == assign(n, nodes, current)


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_the_standby_is_another_member_and_never_the_leader(cluster):
    n, nodes, current = cluster
    for p in assign(n, nodes, current).values():
        assert p.primary in nodes
        if len(nodes) == 1:
            assert p.standby is None
        else:
            assert p.standby in nodes and p.standby != p.primary


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_a_shard_stays_with_its_member_owner_while_that_owner_is_under_its_cap(cluster):
    n, nodes, current = cluster
    plan = assign(n, nodes, current)
    cap = caps(n, nodes, {m: sum(1 for o in current.values() if o.node == m) for m in nodes})
    for m in nodes:
        mine = [s for s, o in current.items() if o.node == m]
        if len(mine) <= cap[m]:
            assert all(plan[s].primary == m for s in mine)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.sampled_from(NAMES))
def test_a_join_moves_at_most_ceil_n_over_m_plus_two_shards(cluster, newcomer):
    n, nodes, current = cluster
    if newcomer in nodes:
        return
    before = carry_out(n, nodes, current)  # a settled cluster
    after = assign(n, [*nodes, newcomer], before)
    moved = sum(1 for s in range(n) if after[s].primary != before[s].node)
    bound = math.ceil(n / (len(nodes) + 1)) + 2
    assert moved <= bound, f"{moved} moves > {bound}"
    assert all(after[s].primary == newcomer for s in range(n) if after[s].primary != before[s].node)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.data())
def test_a_leave_moves_at_most_ceil_n_over_m_plus_two_shards_and_only_the_leavers(cluster, data):
    n, nodes, current = cluster
    if len(nodes) < 2:
        return
    leaver = data.draw(st.sampled_from(nodes))
    before = carry_out(n, nodes, current)
    survivors = [m for m in nodes if m != leaver]
    after = assign(n, survivors, before)
    moved = [s for s in range(n) if after[s].primary != before[s].node]
    assert len(moved) <= math.ceil(n / len(survivors)) + 2
    assert all(before[s].node == leaver for s in moved), "a leave moved a survivor's shard"


@settings(max_examples=100, deadline=None)
@given(clusters(), st.data())
def test_the_plan_is_a_fixed_point_of_its_own_moves(cluster, data):
    """Half-way through the plan (some moves done, some shards between owners) the plan is the same."""
    n, nodes, current = cluster
    plan = assign(n, nodes, current)
    midway = dict(current)
    for s in range(n):
        if current.get(s) is None or current[s].node != plan[s].primary:
            step = data.draw(st.sampled_from(["not yet", "between owners", "done"]))
            if step == "between owners":
                midway.pop(s, None)
            elif step == "done":
                midway[s] = Owner(plan[s].primary, next(_revisions))
    assert primaries(assign(n, nodes, midway)) == primaries(plan)


def test_a_failover_and_the_failed_nodes_return_give_it_back_exactly_its_shards():
    nodes = ["n0", "n1", "n2"]
    settled = carry_out(16, nodes, {})
    plan = assign(16, nodes, settled)
    mine = {s for s, o in settled.items() if o.node == "n2"}
    failed_over = {**settled, **{s: Owner(plan[s].standby, next(_revisions)) for s in mine}}
    back = assign(16, nodes, failed_over)
    assert primaries(back) == {s: o.node for s, o in settled.items()}


@pytest.mark.parametrize(
    "n, members, expected",
    [
        (64, 3, 16),  # 21/21/22 -> 16x4: the newcomer takes 16, nothing moves between the old three
        (64, 4, 12),
        (256, 3, 64),
        (16, 5, 2),
    ],
)
def test_a_join_from_the_settled_placement_moves_the_newcomers_share_only(n, members, expected):
    nodes = [f"n{i}" for i in range(members)]
    before = carry_out(n, nodes, {})
    after = assign(n, [*nodes, "new"], before)
    moved = [s for s in range(n) if after[s].primary != before[s].node]
    assert len(moved) == expected
    assert {after[s].primary for s in moved} == {"new"}


def test_no_members_no_placement():
    assert assign(8, [], {0: Owner("n0", 1)}) == {}
