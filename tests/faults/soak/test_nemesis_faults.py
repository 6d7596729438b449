"""The nemesis on a real cluster: every fault kind applied once, quickly, through a hand-made plan; one fault
that cannot be applied (its node is stopped) recorded as such; one left in force for ``heal_all``; then the
cluster is whole again and every fault is recorded with its real start and end."""

from __future__ import annotations

import time

import pytest

from shardcron.dev.testing.cluster import wait_until
from tests.faults.soak.history import History
from tests.faults.soak.nemesis import CLOCK_ENV, KINDS, Nemesis, PlannedFault

pytestmark = pytest.mark.faults

TTL_S = 4
PLAN = [
    PlannedFault("kill", "n0", 0.0, 1.0),
    PlannedFault("cut-etcd", "n1", 1.0, 2.0),
    PlannedFault("cut-store", "n2", 3.0, 2.0),
    PlannedFault("stop", "n1", 6.0, TTL_S + 1.0),
    PlannedFault("drain", "n0", 6.5, 3.0),
    PlannedFault("term", "n2", 12.0, 1.0),
    PlannedFault("etcd-member", "m0", 15.0, 2.0),
    PlannedFault("etcd-move-leader", "etcd", 22.0, 0.0),
    PlannedFault("etcd-compact", "etcd", 24.0, 0.0),
    PlannedFault("db-conn-kill", "postgresql", 25.0, 0.0),
    PlannedFault("db-restart", "postgresql", 26.0, 0.0),
    PlannedFault("clock", "n1", 30.0, 4.0, offset_ms=800),
    PlannedFault("stop", "n2", 40.0, 600.0),  # still in force at the end: heal_all's
    PlannedFault("kill", "n2", 41.0, 1.0),  # n2 is stopped: not applied
]


def test_every_fault_kind_applies_heals_and_leaves_the_cluster_whole(fault_cluster, figures):
    figures["scenario"] = "nemesis: every fault kind once"
    fc = fault_cluster(ttl=TTL_S)
    fc.start()
    addresses = {n: p.address for n, p in fc.nodes.items()}
    history = History(seed=0, seconds=60, ttl_s=TTL_S, shards=fc.cluster.shards, clock_tolerance_ms=1300, settle_s=8)
    nem = Nemesis(fc, history)
    t0 = time.time()
    nem.run(PLAN, t0)
    wait_until(lambda: len(history.faults) == len(PLAN), PLAN[-1].at_s + 90, 0.5, "every planned fault tried")
    assert [f.kind for f in nem.active] == ["stop"], nem.active
    t_heal = time.time()
    nem.heal_all()
    nem.heal_all()  # idempotent: nothing left to heal or mend

    faults = history.faults
    figures["faults"] = {f"{f.kind} {f.target}": f"{(f.end_ms - f.start_ms) / 1000:.1f} s: {f.detail}" for f in faults}
    assert all(f.end_ms is not None and int(t0 * 1000) <= f.start_ms <= f.end_ms for f in faults), faults
    applied = [f for f in faults if not f.detail.startswith("not applied")]
    assert {f.kind for f in applied} == set(KINDS), [f"{f.kind} {f.target}: {f.detail}" for f in faults]
    refused = [f for f in faults if f.detail.startswith("not applied")]
    assert [(f.kind, f.target) for f in refused] == [("kill", "n2")] and "stopped" in refused[0].detail, refused
    left = next(f for f in faults if (f.kind, f.target) == ("stop", "n2"))
    assert left.end_ms >= int(t_heal * 1000), left
    planned = {(p.kind, p.target): p for p in PLAN[:-2]}  # one of each, but the last two
    for f in applied:
        p = planned.get((f.kind, f.target))
        if p is not None:  # healed on the plan's time, never before it (late, on a busy machine)
            assert f.end_ms >= (t0 + p.end_s) * 1000 - 50, (f, p)

    # The cluster is whole: same nodes at the same addresses, running, not stopped, without a clock offset;
    # 3 healthy etcd members; no cut; no drain; every shard led by a live node.
    assert not nem.surprises, nem.surprises
    assert {n: p.address for n, p in fc.nodes.items()} == addresses
    for n, p in fc.nodes.items():
        assert p.alive(), f"{n} is not running: {p.log_text()[-2000:]}"
        assert CLOCK_ENV not in p.env, f"{n} still has a clock offset"
        assert "DROP" not in fc.lab.rules(n), f"{n}'s namespace still cuts: {fc.lab.rules(n)}"
    assert fc.etcd_healthy() and fc.etcd_members_started() == 3
    assert not [n["node"] for n in fc.cluster.shard_map()["nodes"] if n["draining"]]
    members = set(fc.nodes)
    t_led = fc.monitor.wait(
        lambda m: len(m) == fc.cluster.shards and all(v in members and fc.nodes[v].alive() for v in m.values()),
        4 * TTL_S + 60,
        "every shard led by a live node",
    )
    figures["every shard led after heal_all"] = f"{t_led - t_heal:.1f} s"
    fc.wait_balanced(members, 4 * TTL_S + 60)
    # Reported, not judged here (the soak's checker judges the run): what the nodes made of the faults.
    figures["tracebacks in node logs"] = {n: fc.log(n).count("Traceback") for n in fc.nodes}
