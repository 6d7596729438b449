"""Scale out under load: joins move few shards, a crash and a drain spread shards, and every slot runs once."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from shardcron.coordination.balancer import fair_share
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.history import LeaderHistory
from tests.support.clusters import stopped_after
from tests.support.commands import audit

pytestmark = pytest.mark.cluster

TTL = 4
SHARDS = 64
JOBS = 300


def test_join_crash_drain_under_load_moves_few_shards_and_keeps_every_slot(
    tmp_path, etcd_server, etcd_prefix, fresh_db_url
):
    db = fresh_db_url("postgresql")
    jobs = tmp_path / "jobs.json"
    jobs.write_text(
        json.dumps(
            {"jobs": [{"id": f"load-{i:03d}", "every": "1s", "executor": {"kind": "noop"}} for i in range(JOBS)]}
        )
    )
    c = Cluster(
        etcd_server.endpoints,
        db,
        etcd_prefix,
        SHARDS,
        TTL,
        str(tmp_path),
        extra_args=["--jobs", str(jobs), "--settle", "1"],
    )
    with stopped_after(c):
        c.add("n0")
        leaders = c.wait_all_led(90, by={"n0"})
        started_ms = int(time.time() * 1000)
        members = {"n0"}
        with LeaderHistory(etcd_server.endpoints, etcd_prefix) as history:
            for new in ("n1", "n2", "n3", "n4"):
                # From the settled map before the join to the FIRST settled map after it, every
                # change of leader counts, from etcd's revisions: a shard that moved twice (or
                # moved and came back) counts twice, whatever the final map looks like.
                c.wait_settled(members, 2 * TTL + 60)
                pre_join = history.catch_up_now()
                c.add(new)
                members.add(new)
                c.wait_balanced(members, 2 * TTL + 60)
                history.catch_up_now()
                settled = history.first_settled(pre_join, balanced_over(members))
                assert settled is not None, f"no settled map after {new} joined"
                moves = history.moves(pre_join, settled)
                bound = math.ceil(SHARDS / len(members)) + 2
                assert sum(moves.values()) <= bound, (
                    f"joining {new} changed {sum(moves.values())} leaders before the first settled map; at most "
                    f"{bound} may change: {moves}"
                )
                assert all(n == 1 for n in moves.values()), f"shards that moved more than once: {moves}"
                moved_to = {history.leaders_at(settled)[s] for s in moves}
                assert moved_to == {new}, f"joining {new} moved shards between the old nodes: {moved_to}"
                print(
                    f"joining {new}: {sum(moves.values())} leaders changed up to the first settled map (bound {bound})"
                )

        c.nodes["n1"].kill()
        members.discard("n1")
        leaders = c.wait_balanced(members, 2 * TTL + 60)
        by_node = {n: list(leaders.values()).count(n) for n in members}
        assert max(by_node.values()) - min(by_node.values()) <= 1, f"a crashed node's shards pile up: {by_node}"

        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "shardcron",
                "drain",
                "n2",
                "--etcd",
                etcd_server.endpoints,
                "--prefix",
                etcd_prefix,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        members.discard("n2")
        c.wait_balanced(members, 2 * TTL + 60)
        assert c.nodes["n2"].alive()

        # Let the last moves settle into recorded ticks, then audit the whole run.
        end_ms = int(time.time() * 1000) - 2000
        wait_until(lambda: audit(db, started_ms, end_ms)["clean"], 60, 2.0, "a clean audit of the run")
        report = audit(db, started_ms, end_ms)
        assert report["slots_checked"] >= JOBS * (end_ms - started_ms) // 1000 - JOBS
        assert not report["duplicates"] and not report["missing"] and not report["stale_fence"]


def balanced_over(members: set[str]):
    def ok(leaders: dict[int, str | None]) -> bool:
        if not leaders or any(n is None or n not in members for n in leaders.values()):
            return False
        lo, hi = fair_share(len(leaders), len(members))
        return all(lo <= list(leaders.values()).count(m) <= hi for m in members)

    return ok


def test_a_quick_restart_inside_the_settle_window_does_not_move_shards_twice(tmp_path, etcd_server, etcd_prefix):
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        etcd_prefix,
        16,
        TTL,
        str(tmp_path),
        extra_args=["--settle", "8"],
    )
    everyone = {"n0", "n1", "n2"}
    with stopped_after(c):
        # Grown one node at a time, each join settled, so that `before` is a placement the
        # nodes have finished carrying out (three nodes started at once may still be
        # trading the shards their standbys won first when the map first looks settled).
        members: set[str] = set()
        for n in sorted(everyone):
            c.add(n)
            members.add(n)
            before = c.wait_settled(members, 90)
        mine = {s for s, n in before.items() if n == "n2"}
        with LeaderHistory(etcd_server.endpoints, etcd_prefix) as history:
            c.nodes["n2"].terminate()
            c.nodes.pop("n2")
            c.add("n2")  # back well inside the 8 s settle window
            after = c.wait_settled(everyone, 90)
            moves = history.moves(history.start_revision, history.catch_up_now())
        # The survivors took n2's shards only as standbys (failover), then handed them back,
        # each once: no shard moved between survivors, and n2 got back only its own shards
        # (all of them, or all but one when it held the one ceil share: 16 = 6 + 5 + 5).
        assert all(before[s] == after[s] for s in range(16) if s not in mine), (before, after)
        back = {s for s in mine if after[s] == "n2"}
        assert {s for s, n in after.items() if n == "n2"} == back
        assert len(back) >= len(mine) - 1, (sorted(mine), sorted(back))
        assert set(moves) <= mine and all(m <= 2 for m in moves.values()), moves
