"""A dead worker is a dead node: when any long-lived thread or task of a node fails, the node logs it once,
hands its shards over at once (standbys take them long before its lease could expire), revokes its lease,
and exits with ``EXIT_WORKER_DIED`` for its supervisor to restart it.

Each worker is failed with ``SHARDCRON_TEST_FAIL_THREAD`` (crashpoints.py), armed by a file once the node
leads its shards. A coordinator stuck inside one of its steps (``SHARDCRON_TEST_HANG_IN_ACTION``) is a dead
worker too, told by the session's keep-alive.
"""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from shardcron.api.tokens import hash_secret
from shardcron.coordination.coordinator_settings import step_budget
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.runtime.lifeline import EXIT_WORKER_DIED
from shardcron.sharding import shard_for
from tests.integration.node.test_cluster import write_jobs

pytestmark = pytest.mark.cluster

SHARDS = 2
# Long enough that a lease left to expire is told apart from a resignation on a noisy machine: a node that
# merely died would hold its shards for at least two thirds of it (renewals come every third).
TTL = 9
VICTIM, SURVIVOR = "n0", "n1"

# claimer, recorder, pruner and marks-commit are steps of the tick writer (tick_writer.py), each failed at its
# step: the node reports the tick writer dead, its error naming the step.
WORKERS = [
    "tick-writer",
    "claimer",
    "dispatcher",
    "recorder",
    "pruner",
    "notifier",
    "coordinator",
    f"{VICTIM}-keepalive",
    "settings",
    "node-loop",
    "marks-commit",
    "dashboard-metrics",
]
NODE_SECRET = "node-secret-for-the-worker-death-test"


def needs(worker: str, tmp_path) -> tuple[list[str], list[str], dict[str, str]]:
    """What the nodes need for ``worker`` to run at all: the cluster's flags, the victim's own, and the
    environment (a later flag wins over the cluster's). The settings task is run with a token file, so that it carries the tokens' watch beside the
    calendars' and the namespaces'; the dashboard's sampler runs only with --http-listen."""
    if worker == "settings":
        tokens = tmp_path / "tokens"
        tokens.write_text(f"node {hash_secret(NODE_SECRET)} admin *\n")
        return ["--auth-token-file", str(tokens)], [], {"SHARDCRON_NODE_TOKEN": NODE_SECRET}
    if worker == "pruner":
        # A pass comes a tenth of the retention after the start (rules/retention.prune_every_ms): 2 s, not the
        # minute that the cluster's 1 h would make the test wait.
        return ["--tick-retention", "20s"], [], {}
    if worker.startswith("dashboard"):
        return [], ["--http-listen", f"127.0.0.1:{free_port()}"], {}
    return [], [], {}


def jobs_on_every_shard(tmp_path) -> str:
    """A shell job (it runs on the node's loop and writes a running mark) on each shard, every second."""
    ids: dict[int, str] = {}
    i = 0
    while len(ids) < SHARDS:
        ids.setdefault(shard_for(f"tick-{i}", SHARDS), f"tick-{i}")
        i += 1
    return write_jobs(
        tmp_path / "jobs.toml",
        [{"id": job_id, "every": "1s", "executor": {"kind": "shell", "command": "true"}} for job_id in ids.values()],
    )


def cluster_of(etcd_server, etcd_prefix: str, db: str, tmp_path, *flags: str) -> Cluster:
    """The test's cluster (no node yet): a shell job on every shard, every second, and ``flags`` for every node."""
    return Cluster(
        etcd_server.endpoints,
        db,
        etcd_prefix,
        SHARDS,
        TTL,
        str(tmp_path),
        extra_args=["--jobs", jobs_on_every_shard(tmp_path), "--allow-shell", *flags],
    )


def bump_settings(etcd_endpoints: str, prefix: str) -> None:
    """What a write of calendars, namespaces or tokens does: every node's watcher of them wakes and reloads."""
    layout = KeyLayout(prefix)
    etcd = Etcd(etcd_endpoints, timeout_s=5.0)
    try:
        for key in (layout.calendars, layout.namespaces, layout.tokens):
            etcd.put(key, json.dumps({"name": "test", "at_ms": int(time.time() * 1000)}).encode())
    finally:
        etcd.close()


def error_lines(log: str, worker: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"\bERROR\b", line) and f"worker {worker!r}" in line]


@pytest.mark.parametrize("worker", WORKERS)
def test_a_dead_worker_hands_the_shards_over_at_once_and_the_node_exits_non_zero(
    worker, etcd_server, etcd_prefix, fresh_db_url, tmp_path
):
    arm = tmp_path / "fail-now"
    flags, victim_flags, env = needs(worker, tmp_path)
    c = cluster_of(etcd_server, etcd_prefix, fresh_db_url("sqlite"), tmp_path, "--tick-retention", "1h", *flags)
    try:
        victim = c.add(
            VICTIM,
            extra_args=victim_flags,
            env={**env, "SHARDCRON_TEST_FAIL_THREAD": worker, "SHARDCRON_TEST_FAIL_WHEN": str(arm)},
        )
        c.add(SURVIVOR, env=env)
        leaders = c.wait_balanced({VICTIM, SURVIVOR}, timeout_s=90)
        mine = [s for s, n in leaders.items() if n == VICTIM]
        assert mine

        arm.touch()
        bump_settings(etcd_server.endpoints, etcd_prefix)  # the settings' watchers wake only for a change
        wait_until(
            lambda: error_lines(victim.log_text(), worker) or not victim.alive(),
            60,
            what=f"the node to report its {worker} dead",
        )
        died_at = time.monotonic()
        wait_until(lambda: all(c.leaders()[s] == SURVIVOR for s in mine), 60, what=f"{SURVIVOR} to take {mine}")
        took = time.monotonic() - died_at
        code = victim.proc.wait(60)
        log = victim.log_text()

        assert code == EXIT_WORKER_DIED, log[-4000:]
        assert len(error_lines(log, worker)) == 1, log[-4000:]
        # Handed over, not expired: the lease was revoked as the node left, and the standby needed
        # nothing like the TTL (expiry costs at least 2/3 of it after the last renewal).
        assert re.search(r"lease [0-9a-f]+ revoked", log), log[-4000:]
        assert took < TTL * 2 / 3, f"the shards moved {took:.1f}s after the death: the lease expired, no resign"
        assert "Traceback" not in c.nodes[SURVIVOR].log_text()
    finally:
        c.stop_all()


def test_a_claimer_that_raises_no_longer_leaves_a_leader_that_claims_nothing(
    etcd_server, etcd_prefix, fresh_db_url, tmp_path
):
    """The claimer dying (as a job's out-of-range time once made it) ends the node, and the survivor claims
    and runs the victim's jobs from then on."""
    from sqlalchemy import func, select

    from shardcron.store.engine import make_engine
    from shardcron.store.schema import ticks

    arm = tmp_path / "fail-now"
    db = fresh_db_url("sqlite")
    c = cluster_of(etcd_server, etcd_prefix, db, tmp_path)
    engine = make_engine(db)
    try:
        victim = c.add(VICTIM, env={"SHARDCRON_TEST_FAIL_THREAD": "claimer", "SHARDCRON_TEST_FAIL_WHEN": str(arm)})
        c.add(SURVIVOR)
        leaders = c.wait_balanced({VICTIM, SURVIVOR}, timeout_s=90)
        mine = [s for s, n in leaders.items() if n == VICTIM]

        def claimed_by_survivor_on(shards: list[int]) -> int:
            with engine.connect() as conn:
                return conn.execute(
                    select(func.count())
                    .select_from(ticks)
                    .where(ticks.c.node_id == SURVIVOR, ticks.c.shard.in_(shards))
                ).scalar()

        before = claimed_by_survivor_on(mine)
        arm.touch()
        assert victim.proc.wait(60) == EXIT_WORKER_DIED
        wait_until(
            lambda: claimed_by_survivor_on(mine) >= before + 3,
            60,
            what=f"{SURVIVOR} to claim the slots of {VICTIM}'s shards",
        )
    finally:
        engine.dispose()
        c.stop_all()


def test_a_coordinator_that_hangs_is_shown_where_it_hangs_and_its_lease_revoked_at_stop(
    etcd_server, etcd_prefix, fresh_db_url, tmp_path
):
    """A stop whose coordinator never hands the shards over (it hangs, as one stuck in a call would) still
    ends: past the grace the node logs where the coordinator is, revokes its lease so the standby takes the
    shards at once, and exits with EXIT_WORKER_DIED. Found by a 1800 s soak (seed 1998585354), where such a
    node outlived its SIGTERM by 30 s with its lease alive."""
    arm = tmp_path / "hang-now"
    c = cluster_of(etcd_server, etcd_prefix, fresh_db_url("sqlite"), tmp_path)
    try:
        victim = c.add(
            VICTIM,
            env={
                "SHARDCRON_TEST_FAIL_THREAD": "coordinator",
                "SHARDCRON_TEST_FAIL_HOW": "hang",
                "SHARDCRON_TEST_FAIL_WHEN": str(arm),
            },
        )
        c.add(SURVIVOR)
        leaders = c.wait_balanced({VICTIM, SURVIVOR}, timeout_s=90)
        mine = [s for s, n in leaders.items() if n == VICTIM]
        assert mine

        arm.touch()
        wait_until(lambda: "worker 'coordinator' hangs" in victim.log_text(), 60, what="the coordinator to hang")
        victim.signal(signal.SIGTERM)
        code = victim.proc.wait(120)
        log = victim.log_text()
        assert code == EXIT_WORKER_DIED, log[-4000:]
        assert "the coordinator has not handed the shards over within" in log, log[-4000:]
        assert "in fail_worker" in log, log[-4000:]  # the hung coordinator's stack, down to where it waits
        assert re.search(r"lease [0-9a-f]+ revoked", log), log[-4000:]
        wait_until(lambda: all(c.leaders()[s] == SURVIVOR for s in mine), 60, what=f"{SURVIVOR} to take {mine}")
    finally:
        c.stop_all()


def test_a_coordinator_stuck_in_a_step_while_it_runs_is_shown_where_it_is_and_its_lease_revoked(
    etcd_server, etcd_prefix, fresh_db_url, tmp_path
):
    """A coordinator stuck inside a shard's acquire (as one waiting for a store's answer that never comes) holds
    the election keys it is first in line with, and its keep-alive would keep them alive for ever: no other node
    could lead those shards. Past the step's budget the keep-alive renews the lease no more and tells the node,
    which logs where the coordinator is, revokes the lease and exits with EXIT_WORKER_DIED; the other node leads
    every shard."""
    budget_s = step_budget(etcd_call_s=min(5.0, TTL / 3.0))  # as the node derives it (node.py)
    c = cluster_of(etcd_server, etcd_prefix, fresh_db_url("sqlite"), tmp_path)
    try:
        # Alone at first, the victim campaigns for every shard, is first in each queue, and hangs in its first
        # acquire; the survivor, started then, can only queue behind it.
        victim = c.add(VICTIM, env={"SHARDCRON_TEST_HANG_IN_ACTION": "acquire"})
        wait_until(
            lambda: "the coordinator hangs in its step of 'acquire'" in victim.log_text(),
            90,
            what="the victim's coordinator to hang in an acquire",
        )
        c.add(SURVIVOR)
        # Within the budget, the keep-alive's next wake (TTL/3) and a generous margin for a loaded machine.
        code = victim.proc.wait(budget_s + TTL + 60)
        log = victim.log_text()
        assert code == EXIT_WORKER_DIED, log[-4000:]
        [stuck] = error_lines(log, "coordinator")
        assert re.search(r"is stuck: the coordinator has been in one step \(shard \d+: acquire\)", stuck), stuck
        assert "is renewed no more" in log, log[-4000:]
        assert "in hang_in_action" in log, log[-4000:]  # the stuck coordinator's stack, down to where it waits
        assert re.search(r"lease [0-9a-f]+ revoked", log), log[-4000:]
        wait_until(
            lambda: all(leader == SURVIVOR for leader in c.leaders().values()),
            60,
            what=f"{SURVIVOR} to lead every shard",
        )
    finally:
        c.stop_all()
