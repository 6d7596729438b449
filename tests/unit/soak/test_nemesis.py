"""The soak's fault plan: deterministic for a seed, and every constraint of the design held for any seed."""

from __future__ import annotations

import itertools

import pytest

from shardcron.dev.testing.cluster import NodeProcess
from tests.faults.soak.history import History
from tests.faults.soak.nemesis import (
    AFTERMATH_S,
    CLOCK_OFFSET_MS,
    DB_KINDS,
    INSTANT_KINDS,
    KINDS,
    MAX_BUSY,
    NODE_KINDS,
    Nemesis,
    PlannedFault,
    clock_tolerance_ms,
    max_busy,
    node_skew_ms,
    plan_faults,
    timeline,
)

NODES = ["n0", "n1", "n2"]
MEMBERS = ["m0", "m1", "m2"]
TTL = 4
SEEDS = range(200)


def plan(seed, seconds=55.0, ttl_s=TTL):
    return plan_faults(seed, seconds, NODES, MEMBERS, ttl_s=ttl_s)


def overlap(a: PlannedFault, b: PlannedFault) -> bool:
    return a.at_s <= b.busy_until_s and b.at_s <= a.busy_until_s


def test_a_seed_gives_the_same_plan_every_time():
    assert plan(7) == plan(7)
    assert plan("7") == plan("7")
    assert plan(12345, 1800) == plan(12345, 1800)


def test_seeds_give_different_plans():
    plans = {tuple(plan(s)) for s in range(20)}
    assert len(plans) == 20


@pytest.mark.parametrize("seconds", [55.0, 300.0])
def test_every_constraint_holds_for_every_seed(seconds):
    for seed in SEEDS:
        p = plan(seed, seconds)
        assert p, f"seed {seed}: an empty plan"
        assert p == sorted(p, key=lambda f: f.at_s), f"seed {seed}: not sorted by start"
        for f in p:
            assert f.kind in KINDS
            assert 0 < f.at_s and f.busy_until_s <= seconds, f"seed {seed}: {f} outlasts {seconds} s"
        assert max_busy(p) <= MAX_BUSY, f"seed {seed}: more than {MAX_BUSY} faults at once"
        for a, b in itertools.combinations(p, 2):
            if not overlap(a, b):
                continue
            assert a.target != b.target, f"seed {seed}: two faults on {a.target} at once: {a}, {b}"
            assert not (a.kind == b.kind == "etcd-member"), f"seed {seed}: two etcd members down: {a}, {b}"
            if "db-restart" in (a.kind, b.kind):
                assert not {a.kind, b.kind} <= DB_KINDS, f"seed {seed}: db-restart with another db fault: {a}, {b}"


def test_max_busy_counts_touching_intervals_as_overlapping():
    a = PlannedFault("kill", "n0", 0.0, 2.0)  # busy until 5.0
    b = PlannedFault("stop", "n1", a.busy_until_s, 6.0)
    c = PlannedFault("cut-etcd", "n2", 10.0, 2.0)
    assert max_busy([a, b]) == 2
    assert max_busy([a, c]) == 1
    assert max_busy([]) == 0


def test_each_kind_has_its_target_and_duration():
    for seed in range(50):
        for f in plan(seed, 600):
            if f.kind in NODE_KINDS:
                assert f.target in NODES
            elif f.kind == "etcd-member":
                assert f.target in MEMBERS
            else:
                assert f.target == ("postgresql" if f.kind.startswith("db-") else "etcd")
            lo, hi = {
                "stop": (TTL + 1, 2 * TTL + 2),
                "kill": (1, 8),
                "term": (1, 8),
                "cut-etcd": (2, 3 * TTL),
                "cut-store": (2, 3 * TTL),
                "etcd-member": (2, 10),
                "clock": (10, 30),
                "drain": (5, 20),
            }.get(f.kind, (0, 0))
            assert lo <= f.duration_s <= hi, f
            assert (f.duration_s == 0) == (f.kind in INSTANT_KINDS), f
            if f.kind == "clock":
                assert CLOCK_OFFSET_MS[0] <= abs(f.offset_ms) <= CLOCK_OFFSET_MS[1], f
            else:
                assert f.offset_ms == 0, f


def test_a_long_plan_covers_every_kind_and_the_common_ones_most():
    for seed in range(20):
        p = plan(seed, 1800)
        kinds = [f.kind for f in p]
        assert set(kinds) == set(KINDS), f"seed {seed}: missing {set(KINDS) - set(kinds)}"
        rare = max(kinds.count(k) for k in ("etcd-move-leader", "etcd-compact", "db-restart", "db-conn-kill"))
        assert all(kinds.count(k) > rare for k in ("kill", "stop", "cut-etcd", "cut-store")), seed


def test_short_plans_cover_most_kinds_between_them():
    covered = {f.kind for s in (7, 30, 1) for f in plan(s)}
    assert len(covered) >= len(KINDS) - 3, set(KINDS) - covered


def test_every_stop_outlasts_the_ttl():
    for ttl in (2, 4, 6):
        stops = [f for s in range(50) for f in plan(s, 300, ttl) if f.kind == "stop"]
        assert stops and all(f.duration_s > ttl for f in stops)


def test_clock_tolerance_is_the_largest_offset_plus_slack():
    assert clock_tolerance_ms([]) == 500
    p = [
        PlannedFault("clock", "n0", 1, 10, -1400),
        PlannedFault("clock", "n1", 20, 10, 900),
        PlannedFault("kill", "n2", 3, 2),
    ]
    assert clock_tolerance_ms(p) == 1900
    for seed in range(50):
        p = plan(seed, 600)
        assert clock_tolerance_ms(p) == max([abs(f.offset_ms) for f in p] + [0]) + 500


def test_node_skew_adds_the_offsets_of_clock_faults_on_two_nodes_at_once():
    assert node_skew_ms([]) == 500
    apart = [PlannedFault("clock", "n0", 1, 10, -1400), PlannedFault("clock", "n1", 100, 10, 900)]
    assert node_skew_ms(apart) == 1400 + 500  # never at once: one clock off an unmoved one
    together = [PlannedFault("clock", "n0", 1, 10, -1400), PlannedFault("clock", "n1", 5, 10, 900)]
    assert node_skew_ms(together) == 1400 + 900 + 500
    one_node = [PlannedFault("clock", "n0", 1, 10, -1400), PlannedFault("clock", "n0", 5, 10, 900)]
    assert node_skew_ms(one_node) == 1400 + 500  # one node runs one clock at a time
    for seed in range(50):
        p = plan(seed, 600)
        assert clock_tolerance_ms(p) <= node_skew_ms(p) <= 2 * clock_tolerance_ms(p)


def test_the_timeline_heals_before_it_applies_and_pulses_instant_faults():
    a = PlannedFault("kill", "n0", 1.0, 4.0)
    b = PlannedFault("stop", "n0", 5.0, 6.0)
    c = PlannedFault("etcd-compact", "etcd", 5.0, 0.0)
    steps = [(t, step, f.kind) for t, step, f in timeline([a, b, c])]
    assert steps == [
        (1.0, "apply", "kill"),
        (5.0, "heal", "kill"),
        (5.0, "apply", "stop"),
        (5.0, "pulse", "etcd-compact"),
        (11.0, "heal", "stop"),
    ]


def test_every_aftermath_is_known():
    assert set(AFTERMATH_S) == set(KINDS)


class _NeverStarted:
    """A cluster whose one node never started: enough for the node faults that must be refused."""

    db_url = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # never connected to by a refused fault

    def __init__(self):
        self.nodes = {"n0": NodeProcess("n0", "", "", "/p", 12, TTL, "/dev/null")}


@pytest.mark.parametrize("kind", sorted(NODE_KINDS))
def test_a_fault_on_a_node_that_does_not_run_is_recorded_not_applied(kind):
    history = History(seed=1, seconds=60, ttl_s=TTL, shards=12, clock_tolerance_ms=500, settle_s=8)
    nem = Nemesis(_NeverStarted(), history, log=lambda _: None)
    assert nem.apply(PlannedFault(kind, "n0", 1.0, 5.0)) is False
    assert nem.apply(PlannedFault(kind, "n9", 2.0, 5.0)) is False
    refused, unknown = history.faults
    assert (refused.kind, refused.target) == (kind, "n0")
    assert refused.detail == "not applied: n0 is not running (exit code None)"
    assert unknown.detail.startswith("not applied: no node 'n9' in the cluster")
    assert all(f.end_ms is not None and f.start_ms <= f.end_ms for f in history.faults)
    assert nem.active == []
