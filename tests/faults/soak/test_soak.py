"""The nemesis soak: a seeded run of random job operations under random, overlapping faults, judged whole.

One run: a 3-node cluster in network namespaces over a 3-member etcd and
PostgreSQL (``harness.FaultCluster``) with the soak's static jobs; the stream
consumer; the operation generator and the nemesis, both from the seed; then
every fault healed, the schedule followed until every owed slot is final, the
history collected from the store and judged by ``checker.check`` (which also
compares ``shardcron audit``'s verdict with its own).

``make test`` runs two fixed seeds and one random one, 40 s of faults
each (about 4 minutes in all). ``make soak SECONDS=1800 [SEED=S]`` runs one long soak. Every run prints
its seed and the command that replays it; a failed run keeps the node and etcd
logs, ``history.json`` and ``findings.json`` (see tests/faults/conftest.py).
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest
from sqlalchemy import select

from shardcron.dev.testing.cluster import wait_until
from shardcron.store.schema import ticks
from tests.faults import harness
from tests.faults.harness import now_ms, sleep_until
from tests.faults.soak import checker, generator, nemesis, workload
from tests.faults.soak.history import FINAL_STATUSES, History, LeaderSample

pytestmark = [pytest.mark.faults, pytest.mark.soak]

TTL_S = 4
# The liveness allowance beyond the TTL after the final heal: the product's settle window (1 s), plus the
# start-up of a node restarted by the heal (a Python process importing its extras on a loaded 2-core machine).
SETTLE_S = 8.0
FIXED_SEEDS = (7, 30)
CI_SECONDS = 40.0
# After the final heal, the schedule is followed for this long before it is judged: long enough for every
# shard to be led again, every job to tick again, and catch-up to finish.
AFTER_HEAL_S = TTL_S + SETTLE_S + 6


def _seeds() -> list:
    seed = os.environ.get("SHARDCRON_SOAK_SEED", "").strip()
    if seed:
        return [int(seed)]
    if os.environ.get("SHARDCRON_SOAK_SECONDS", "").strip():
        return ["random"]  # a long run on demand: one random seed
    return [*FIXED_SEEDS, "random"]


def _seconds() -> float:
    raw = os.environ.get("SHARDCRON_SOAK_SECONDS", "").strip()
    return float(raw) if raw else CI_SECONDS


@pytest.mark.parametrize("seed", _seeds(), ids=lambda s: f"seed-{s}")
def test_soak(seed, fault_cluster, fault_lab, tmp_path, figures, capsys):
    if seed == "random":
        seed = random.SystemRandom().randrange(1, 2**31)
    seconds = _seconds()
    replay = f"make soak SEED={seed} SECONDS={seconds:g}"
    with capsys.disabled():
        print(f"\nsoak: seed {seed}, {seconds:g} s of faults (replay: {replay})", flush=True)
    figures["scenario"] = f"9. soak seed {seed}"
    figures["replay"] = replay

    nodes = ("n0", "n1", "n2")
    history = History(
        seed=seed, seconds=seconds, ttl_s=TTL_S, shards=harness.SHARDS, clock_tolerance_ms=0, settle_s=SETTLE_S
    )
    with workload.Workload(fault_lab, history) as wl:
        fc = fault_cluster(ttl=TTL_S, job_defs=wl.job_defs, extra_args=wl.node_args)
        wl.prepare(fc)
        fc.start(node_ids=nodes)
        members = [m.name for m in fc.etcd.members]
        plan = nemesis.plan_faults(seed, seconds, list(nodes), members, ttl_s=TTL_S)
        history.clock_tolerance_ms = nemesis.clock_tolerance_ms(plan)
        history.node_skew_ms = nemesis.node_skew_ms(plan)
        history.static_jobs = wl.static_history(fc.engine)
        figures["faults planned"] = len(plan)

        gen = generator.OperationGenerator(
            {n: p.address for n, p in fc.nodes.items()},
            random.Random(seed),
            history,
            static_ids=[j.id for j in history.static_jobs],
        )
        nem = nemesis.Nemesis(fc, history)
        t0 = time.time()
        history.started_ms = int(t0 * 1000)
        gen.start()
        nem.run(plan, t0)
        try:
            sleep_until(t0 + seconds)  # the run itself: faults and operations go on meanwhile
        finally:
            nem.stop()
            nem.heal_all()
            history.heal_ms = now_ms()
            gen.stop()
        unknown = gen.heal_ops(timeout_s=120)

        history.end_ms = (history.heal_ms // 1000 + int(AFTER_HEAL_S)) * 1000
        sleep_until(history.end_ms / 1000 + 1)
        _wait_final(fc, history.end_ms)
        wl.drain(timeout_s=60)
        _collect(fc, wl, history)

    (tmp_path / "history.json").write_text(history.to_json())
    report = checker.check(history)
    (tmp_path / "findings.json").write_text(json.dumps(report.to_dict(), indent=1, sort_keys=True))
    figures.update(report.figures())
    summary = report.summary()
    with capsys.disabled():
        print(summary, flush=True)
    # Judged whole first (history and findings kept), then failed with everything at once.
    problems = [] if report.ok else [f"the checker's findings:\n{summary}"]
    if unknown:
        problems.append(f"jobs whose state the generator could not learn again after the heal: {unknown}")
    if nem.surprises:
        problems.append(f"processes that died or exited badly with no fault on them: {nem.surprises}")
    assert not problems, f"the soak failed (replay: {replay}):\n" + "\n".join(problems)


def _wait_final(fc: harness.FaultCluster, end_ms: int) -> None:
    """Until no row of a slot up to ``end_ms`` is still claimed or running (a healed cluster settles them)."""

    def settled():
        with fc.engine.connect() as c:
            open_rows = c.execute(
                select(ticks.c.job_id)
                .where(ticks.c.scheduled_at_ms <= end_ms, ticks.c.status.not_in(sorted(FINAL_STATUSES)))
                .limit(1)
            ).all()
        return not open_rows

    try:
        wait_until(settled, 90, 0.5, f"every row up to {end_ms} to be final")
    except TimeoutError:
        pass  # the checker reports the rows that never settled, with everything else


def _collect(fc: harness.FaultCluster, wl: workload.Workload, history: History) -> None:
    store = workload.collect_store(fc.engine)
    history.ticks, history.fences, history.effects = store.ticks, store.fences, store.effects
    history.deliveries = wl.deliveries()
    history.leaders = [
        LeaderSample(int(s.t * 1000), s.leaders) for s in fc.monitor.samples if s.t * 1000 >= history.heal_ms - 1000
    ]
    history.audit, _ = harness.run_audit(
        fc.db_url,
        history.started_ms,
        history.end_ms,
        clock_tolerance_ms=history.between_nodes_ms,  # the audit compares one node's stamps with another's
        etcd=fc.etcd.endpoints,
        prefix=fc.cluster.prefix,
    )
