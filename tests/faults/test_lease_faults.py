"""A leader cut off from etcd (its lease stalls, or it is partitioned past the TTL) or frozen mid-tick.

Each node runs in its own network namespace; a cut is an iptables DROP inside
that namespace on the etcd client ports, so only that node loses etcd while
it keeps the database and its peers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from sqlalchemy import select

from shardcron.dev.testing.cluster import wait_until
from shardcron.sharding import shard_for
from shardcron.store.schema import ticks
from tests.faults.harness import sleep_until

pytestmark = pytest.mark.faults

LOG_SLACK_S = 0.25  # how late a log line may trail the event it reports, on a busy machine


def _victim_raises_after(fc, shards: list[int], victim: str, t: float) -> dict[int, tuple[int, str, int]]:
    """shard -> the first fence raised after wall time ``t`` by a node other than ``victim``."""
    out = {}
    for shard, raises in fc.raises().items():
        if shard in shards:
            first = next(((f, n, at) for f, n, at in raises if at >= t * 1000 and n != victim), None)
            if first:
                out[shard] = first
    return out


def _claims_by(fc, node: str, from_ms: int, to_ms: int) -> list:
    with fc.engine.connect() as c:
        return c.execute(
            select(ticks.c.job_id, ticks.c.scheduled_at_ms, ticks.c.fence, ticks.c.claimed_at_ms).where(
                ticks.c.node_id == node, ticks.c.claimed_at_ms > from_ms, ticks.c.claimed_at_ms < to_ms
            )
        ).all()


def test_lease_renewal_stall_fails_over_through_the_session_lost_event(fault_cluster, figures):
    ttl = 4
    figures["scenario"] = "1. lease-renewal stall"
    fc = fault_cluster(ttl=ttl)
    fc.start()
    victim = fc.leader_of_most()
    mine = fc.shards_of(victim)
    others = set(fc.nodes) - {victim}
    figures["fault"] = f"DROP {victim} -> etcd client ports for 1.5×TTL = {1.5 * ttl:.1f} s; it led shards {mine}"

    t_cut = fc.cut_etcd(victim)
    t_led = fc.monitor.wait(
        lambda m: all(m.get(s) in others for s in mine), 2 * ttl + 20, f"the runner-up to lead {victim}'s shards"
    )
    failover = t_led - t_cut
    figures["failover measured"] = f"{failover:.2f} s"
    figures["theoretical window"] = f"≤ 2×TTL = {2 * ttl} s (lease expiry {2 * ttl / 3:.1f}..{ttl} s after the cut)"

    # `shardcron shards --json`, from the root namespace, agrees.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "shards",
            "--etcd",
            fc.etcd.endpoints,
            "--prefix",
            fc.cluster.prefix,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    printed = {r["shard"]: r["leader"] for r in json.loads(out.stdout)["shards"]}
    assert all(printed[s] in others for s in mine), printed

    # The old leader gave up by its own deadline (an event), before any successor could raise a fence.
    lost_at = wait_until(
        lambda: fc.log(victim).first("session lost", t_cut), ttl + 10, 0.1, f"{victim} to log 'session lost'"
    )
    figures["session lost after the cut"] = f"{lost_at - t_cut:.2f} s"
    assert lost_at - t_cut <= ttl + 0.5, "the session must be judged lost TTL after the last confirmed renewal"
    raised = _victim_raises_after(fc, mine, victim, t_cut)
    assert set(raised) == set(mine), raised
    first_raise = min(at for _, _, at in raised.values()) / 1000
    figures["old leader stopped before the first successor raise by"] = f"{first_raise - lost_at:.2f} s"
    # The design: the old leader's deadline passes before etcd can expire its lease. The log line comes from
    # a thread that a loaded 2-core box may run late, hence the slack; the fence (verify) is the hard check.
    assert lost_at <= first_raise + LOG_SLACK_S, (
        f"{victim} logged 'session lost' at {lost_at:.3f}, {lost_at - first_raise:.3f} s after a successor "
        f"raised its fence at {first_raise:.3f}"
    )

    sleep_until(t_cut + 1.5 * ttl)
    t_restore = fc.restore(victim)
    t_back = fc.wait_balanced(set(fc.nodes), 2 * ttl + 60)
    figures["rejoined (balanced again) after restore"] = f"{t_back - t_restore:.2f} s"
    assert fc.shards_of(victim), f"{victim} leads shards again after it rejoins"

    # Its shard loops ended at the event: nothing claimed by it between the loss and its return.
    late = _claims_by(fc, victim, int(lost_at * 1000), int(t_restore * 1000))
    assert not late, f"{victim} claimed slots after its session was lost: {late[:5]}"

    v = fc.verify()
    fc.assert_clean(v)
    assert fc.nodes[victim].alive()


def test_split_brain_the_cut_off_leader_is_fenced(fault_cluster, figures):
    ttl = 5
    figures["scenario"] = "2. split brain"
    fc = fault_cluster(ttl=ttl)
    fc.start()
    victim = fc.leader_of_most()
    mine = fc.shards_of(victim)
    others = set(fc.nodes) - {victim}
    cut_s = 2 * ttl + 2
    figures["fault"] = f"DROP {victim} <-> etcd for 2×TTL+2 = {cut_s} s (it keeps the database); shards {mine}"
    with fc.engine.connect() as c:
        old_fences = {
            (r.shard, r.fence)
            for r in c.execute(select(ticks.c.shard, ticks.c.fence).where(ticks.c.node_id == victim).distinct())
        }

    t_cut = fc.cut_etcd(victim)
    t_led = fc.monitor.wait(
        lambda m: all(m.get(s) in others for s in mine), 2 * ttl + 20, f"the others to lead {victim}'s shards"
    )
    figures["failover measured"] = f"{t_led - t_cut:.2f} s"
    figures["theoretical window"] = f"≤ 2×TTL = {2 * ttl} s (lease expiry {2 * ttl / 3:.1f}..{ttl} s after the cut)"
    lost_at = wait_until(
        lambda: fc.log(victim).first("session lost", t_cut), ttl + 10, 0.1, f"{victim} to log 'session lost'"
    )
    figures["session lost after the cut"] = f"{lost_at - t_cut:.2f} s"
    sleep_until(t_cut + cut_s)
    t_restore = fc.restore(victim)
    fc.wait_balanced(set(fc.nodes), 2 * ttl + 60)

    raised = _victim_raises_after(fc, mine, victim, t_cut)
    assert set(raised) == set(mine), raised
    first_raise = min(at for _, _, at in raised.values()) / 1000
    figures["old leader stopped before the first successor raise by"] = f"{first_raise - lost_at:.2f} s"
    assert lost_at <= first_raise + LOG_SLACK_S, (
        f"{victim} logged 'session lost' {lost_at - first_raise:.3f} s after the successor raised the fence"
    )

    v = fc.verify()
    # Rows under the cut-off node's old fences: none claimed or started after the successor's raise
    # (verify's stale_rows covers every shard; here the victim's own fences are named).
    stale_victim = [r for r in v.stale_rows if (r["shard"], r["fence"]) in old_fences]
    assert not stale_victim, f"writes of the cut-off node landed after the successor's raise: {stale_victim[:5]}"
    late = _claims_by(fc, victim, int(lost_at * 1000), int(t_restore * 1000))
    assert not late, f"{victim} claimed slots after its session was lost: {late[:5]}"
    figures["fenced rejections of the cut-off node"] = v.fenced.get(victim)
    fc.assert_clean(v)


def test_stop_the_world_pause_mid_tick_starts_nothing_after_the_takeover(fault_cluster, figures):
    ttl = 4
    figures["scenario"] = "3. stop-the-world pause"
    fc = fault_cluster(ttl=ttl, slow=6)
    fc.start()
    slow_ids = [j.id for j in fc.job_defs if j.id.startswith("slow-")]
    # The victim: the node leading the most slow jobs' shards, paused while one of its calls is in flight.
    leaders = fc.monitor.latest()
    by_node: dict[str, int] = {}
    for j in slow_ids:
        n = leaders[shard_for(j, fc.cluster.shards)]
        by_node[n] = by_node.get(n, 0) + 1
    victim = max(by_node, key=by_node.get)
    mine = fc.shards_of(victim)
    others = set(fc.nodes) - {victim}

    def in_flight(reqs):
        now = time.time() * 1000
        return [
            r
            for r in reqs
            if r.header("x-shardcron-node") == victim and "/slow/" in r.path and now - 2000 < r.received_at_ms
        ]

    assert fc.sink.wait_for(lambda reqs: bool(in_flight(reqs)), 30), "a slow call of the victim in flight"
    fc.nodes[victim].pause()
    t_pause = time.time()
    flying = {
        r.header("idempotency-key")
        for r in fc.sink.requests()
        if r.header("x-shardcron-node") == victim
        and "/slow/" in r.path
        and r.received_at_ms + 2500 > t_pause * 1000 + 100
    }
    assert flying
    figures["fault"] = (
        f"SIGSTOP {victim} for 2×TTL = {2 * ttl} s with {len(flying)} slow calls in flight; shards {mine}"
    )

    t_led = fc.monitor.wait(
        lambda m: all(m.get(s) in others for s in mine), 2 * ttl + 20, f"the others to lead {victim}'s shards"
    )
    figures["failover measured"] = f"{t_led - t_pause:.2f} s"
    figures["theoretical window"] = (
        f"{2 * ttl / 3:.1f}..{ttl} s after the pause (TTL after the last renewal) + election and fence raise"
    )
    sleep_until(t_pause + 2 * ttl)
    fc.nodes[victim].resume()
    t_wake = time.time()
    wait_until(lambda: fc.log(victim).first("session lost", t_pause), 30, 0.1, "the woken node to notice")
    # Its late results (the calls that were in flight) reach the store and are turned away.
    wait_until(
        lambda: fc.log(victim).fenced_rejections()["rejected by the fence"] > 0,
        30,
        0.2,
        "the woken node's late result write to be rejected by the fence",
    )
    # Give the woken node time to try whatever it would try.
    settle_ms = (time.time() + 3) * 1000
    assert fc.sink.wait_for(lambda reqs: any(r.received_at_ms > settle_ms for r in reqs), 30)

    woken_after = [
        r for r in fc.sink.requests() if r.header("x-shardcron-node") == victim and t_pause * 1000 < r.received_at_ms
    ]
    raised = _victim_raises_after(fc, mine, victim, t_pause)
    stale_starts = [
        r.header("idempotency-key")
        for r in woken_after
        if int(r.header("x-shardcron-shard")) in raised
        and int(r.header("x-shardcron-fence")) < raised[int(r.header("x-shardcron-shard"))][0]
    ]
    figures["woken-leader calls after the pause (any fence)"] = len(woken_after)
    assert not stale_starts, f"executors of the woken leader started under its old fence: {stale_starts[:5]}"

    with fc.engine.connect() as c:
        rows = {
            f"{r.job_id}:{r.scheduled_at_ms}": r for r in c.execute(select(ticks).where(ticks.c.job_id.in_(slow_ids)))
        }
    outcomes = {k: (rows[k].status, rows[k].node_id, rows[k].fence) for k in flying}
    figures["in-flight slots' final rows"] = sorted({s for s, _, _ in outcomes.values()})
    # The successor settled them (abandoned: no retries left); the woken node's late 'succeeded' never landed.
    assert all(s == "abandoned" for s, _, _ in outcomes.values()), outcomes
    assert all("died mid-run" in (rows[k].error or "") for k in flying), {k: rows[k].error for k in flying}
    figures["woken at"] = f"{t_wake - t_pause:.1f} s after the pause"

    v = fc.verify()
    fc.assert_clean(v)
    assert fc.nodes[victim].alive(), "the woken node keeps running and rejoins"
