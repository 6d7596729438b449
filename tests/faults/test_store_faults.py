"""The database goes away under a running cluster: stopped for real, then blackholed.

The stop restarts the machine's PostgreSQL, which every test database lives
in (they survive it): run this scenario alone, never next to another suite.
PostgreSQL is started again in a ``finally``, whatever happens.
"""

from __future__ import annotations

import re
import time

import pytest
from sqlalchemy import select

from shardcron.dev.testing.cluster import wait_until
from shardcron.store.schema import ticks
from tests.faults.harness import pg_ctl, sleep_until
from tests.support.databases import server_problem

pytestmark = pytest.mark.faults

OUTAGE_S = 20
CLAIM_FAILED = re.compile(r"claim\w*\b.*\bfailed")
# engine.py: connect_timeout 5 s, statement_timeout 10 s. A claim must fail within these, not hang.
CONNECT_TIMEOUT_S = 5
FAIL_FAST_S = CONNECT_TIMEOUT_S + 10


def _claims_between(fc, from_s: float, to_s: float) -> list:
    with fc.engine.connect() as c:
        return c.execute(
            select(ticks.c.job_id, ticks.c.scheduled_at_ms, ticks.c.node_id, ticks.c.claimed_at_ms).where(
                ticks.c.claimed_at_ms > int(from_s * 1000), ticks.c.claimed_at_ms < int(to_s * 1000)
            )
        ).all()


def _wait_claiming_again(fc, after_s: float, timeout_s: float) -> float:
    """Until every node has claimed a slot after ``after_s``; returns when."""

    def ok():
        with fc.engine.connect() as c:
            nodes = {
                n
                for (n,) in c.execute(
                    select(ticks.c.node_id).where(ticks.c.claimed_at_ms > int(after_s * 1000)).distinct()
                )
            }
        return set(fc.nodes) <= nodes

    wait_until(ok, timeout_s, 0.25, "every node to claim again")
    return time.time()


def _outage_checks(fc, label: str, t0: float, t1: float, figures: dict) -> list[str]:
    """What must hold for an outage from ``t0`` to ``t1``: claims failed fast and were logged,
    nothing was claimed or executed meanwhile, and every node lived through it."""
    problems = []
    fails = {n: fc.log(n).first_match(CLAIM_FAILED, t0 - 0.001) for n in fc.nodes}
    fails = {n: (t if t is not None and t <= t1 else None) for n, t in fails.items()}
    figures[f"{label}: first claim failure logged"] = {
        n: (f"{t - t0:.2f} s" if t else "none (claims hung)") for n, t in fails.items()
    }
    slow = {n: t for n, t in fails.items() if t is None or t - t0 > FAIL_FAST_S}
    if slow:
        problems.append(
            f"{label}: claims did not fail within {FAIL_FAST_S} s (connect + statement timeout) "
            f"on {sorted(slow)}: first failure per node {figures[f'{label}: first claim failure logged']}"
        )
    # claimed_at is read before the claim's transaction opens its connection, so an attempt begun in
    # the last connect timeout of the outage may commit just after it: only earlier stamps are wrong.
    during = _claims_between(fc, t0 + 2, t1 - CONNECT_TIMEOUT_S - 1)
    if during:
        problems.append(f"{label}: {len(during)} claims recorded during the outage: {during[:5]}")
    ran = [r.header("idempotency-key") for r in fc.sink.requests() if t0 * 1000 + 2000 < r.received_at_ms < t1 * 1000]
    if ran:
        problems.append(f"{label}: http jobs ran while no claim could be recorded: {ran[:10]}")
    dead = [n for n, p in fc.nodes.items() if not p.alive()]
    if dead:
        problems.append(f"{label}: nodes died: {dead}")
    return problems


def test_database_outage_stop_and_blackhole_nothing_runs_unclaimed(fault_cluster, figures):
    ttl = 4
    figures["scenario"] = "6. database outage"
    figures["fault"] = (
        f"A: pg_ctlcluster stop -m fast for {OUTAGE_S} s; B: iptables DROP from every node "
        f"namespace to the PostgreSQL forwarder for {OUTAGE_S} s"
    )
    fc = fault_cluster(ttl=ttl)
    fc.start()

    # -- A: PostgreSQL stopped: connections are refused and reset -----------------------------
    t_a = time.time()
    try:
        pg_ctl("stop")
        sleep_until(t_a + OUTAGE_S)
    finally:
        t_a_end = time.time()  # nothing can be written before this
        pg_ctl("start")
        wait_until(lambda: server_problem("postgresql") is None, 60, 0.2, "PostgreSQL to answer again")
    problems = _outage_checks(fc, "A (stopped)", t_a, t_a_end, figures)
    back_a = _wait_claiming_again(fc, t_a_end, 60)
    figures["A: every node claiming again after the start"] = f"{back_a - t_a_end:.2f} s"

    # -- B: the database blackholed: packets dropped, nothing refused ---------------------------
    t_b = time.time()
    try:
        for n in fc.nodes:
            fc.cut_store(n)
        sleep_until(t_b + OUTAGE_S)
    finally:
        t_b_end = time.time()
        for n in list(fc.nodes):
            fc.restore(n)
    problems += _outage_checks(fc, "B (DROP)", t_b, t_b_end, figures)
    back_b = _wait_claiming_again(fc, t_b_end, 90)
    figures["B: every node claiming again after the DROP was lifted"] = f"{back_b - t_b_end:.2f} s"
    figures["failover measured"] = "none needed (etcd unaffected; leaders keep their shards)"
    figures["theoretical window"] = f"claims fail within connect+statement timeouts ({FAIL_FAST_S} s)"

    # After recovery every missed slot runs once, and nothing is left claimed (verify).
    v = fc.verify()
    fc.assert_clean(v, problems)
