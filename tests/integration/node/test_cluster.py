"""Real node processes over a real etcd and real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.view import read_view
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.sharding import shard_for
from shardcron.store.engine import make_engine
from shardcron.store.schema import fence_log, ticks
from tests.support.clusters import TTL

pytestmark = pytest.mark.cluster

CLUSTER_DBS = [k for k in ("sqlite", "postgresql") if k in os.environ.get("SHARDCRON_TEST_DBS", "sqlite,postgresql")]
# How long a SIGSTOPped leader stays stopped: its lease expires and its shards move within about one TTL, and it
# sleeps on as long again, so that it wakes to a settled successor with every slot it held long overdue.
PAUSED_S = 2 * TTL
# The paused leader's jobs are due every second.
PING_EVERY_S = 1
# After the woken leader says its session is lost: the window in which a stale start it still made (of an
# overdue slot) would reach the sink; three of the jobs' intervals.
STALE_START_WINDOW_S = 3 * PING_EVERY_S


def write_jobs(path, jobs: list[dict]) -> str:
    lines = []
    for j in jobs:
        lines.append("[[jobs]]")
        for k, v in j.items():
            lines.append(f"{k} = {json.dumps(v) if not isinstance(v, dict) else _inline(v)}")
        lines.append("")
    path.write_text("\n".join(lines))
    return str(path)


def _inline(d: dict) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + " }"


@pytest.fixture(params=CLUSTER_DBS)
def cluster_db(request, fresh_db_url):
    return fresh_db_url(request.param)


def count_by_node(leaders: dict[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in leaders.values():
        out[node] = out.get(node, 0) + 1
    return out


def slots_of(engine, job_id: str) -> list[int]:
    with engine.connect() as c:
        return [
            r[0]
            for r in c.execute(
                select(ticks.c.scheduled_at_ms).where(ticks.c.job_id == job_id).order_by(ticks.c.scheduled_at_ms)
            )
        ]


def assert_every_slot_once(engine, job_id: str, interval_ms: int = 1000) -> list[int]:
    """No duplicate (the key forbids it) and no gap between the first and last recorded slot."""
    slots = slots_of(engine, job_id)
    assert slots, f"no ticks recorded for {job_id}"
    assert len(slots) == len(set(slots))
    gaps = [(a, b) for a, b in zip(slots, slots[1:], strict=False) if b - a != interval_ms]
    assert not gaps, f"{job_id}: slots missing between {gaps[:5]}"
    return slots


def test_three_nodes_split_sixteen_shards_then_a_fourth_joins_and_one_leaves(make_cluster, cluster_db, etcd_server):
    c = make_cluster(cluster_db, shards=16)
    for i in range(3):
        c.add(f"n{i}")
    leaders = c.wait_balanced({"n0", "n1", "n2"}, timeout_s=60)
    assert sorted(count_by_node(leaders).values()) == [5, 5, 6]

    # `shardcron shards --json` agrees with etcd itself.
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "shards", "--etcd", etcd_server.endpoints, "--prefix", c.prefix, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    etcd = Etcd(etcd_server.endpoints)
    view = read_view(etcd, KeyLayout(c.prefix))
    etcd.close()
    for row in printed["shards"]:
        queue = view.queue(row["shard"])
        assert row["leader"] == queue[0].node_id
        assert row["fence"] == queue[0].create_revision
        assert row["candidates"] == len(queue) >= 2, "with 2+ nodes every shard keeps a standby"

    c.add("n3")
    leaders = c.wait_balanced({"n0", "n1", "n2", "n3"}, timeout_s=2 * TTL + 30)
    assert count_by_node(leaders)["n3"] == 4

    assert c.nodes["n1"].terminate() == 0
    leaders = c.wait_balanced({"n0", "n2", "n3"}, timeout_s=2 * TTL + 30)
    assert sorted(count_by_node(leaders).values()) == [5, 5, 6]


def test_kill_9_the_leader_then_the_successor_catches_up_every_missed_slot(make_cluster, cluster_db, tmp_path):
    jobs = write_jobs(tmp_path / "jobs.toml", [{"id": "every-second", "every": "1s", "executor": {"kind": "noop"}}])
    c = make_cluster(cluster_db, shards=4, extra_args=["--jobs", jobs])
    for i in range(2):
        c.add(f"n{i}")
    shard = shard_for("every-second", 4)
    leaders = c.wait_balanced({"n0", "n1"}, timeout_s=60)
    victim = leaders[shard]
    survivor = ({"n0", "n1"} - {victim}).pop()
    engine = make_engine(cluster_db)
    try:

        def ticks_by(node):
            with engine.connect() as conn:
                return conn.execute(
                    select(func.count())
                    .select_from(ticks)
                    .where(ticks.c.job_id == "every-second", ticks.c.node_id == node, ticks.c.status == "succeeded")
                ).scalar()

        wait_until(lambda: ticks_by(victim) >= 2, 30, what="the leader to run the job")
        c.nodes[victim].kill()
        killed_at = time.time()
        new = wait_until(lambda: c.leaders()[shard] == survivor, 2 * TTL + 10, what="the successor to lead")
        assert new
        took = time.time() - killed_at
        assert took <= 2 * TTL + 10
        # The successor records slots past the kill, and none is missing in between.
        wait_until(
            lambda: slots_of(engine, "every-second")[-1] > killed_at * 1000 + 2000, 30, what="ticks after the failover"
        )
        assert_every_slot_once(engine, "every-second")
        with engine.connect() as conn:
            fences = dict(
                conn.execute(
                    select(ticks.c.node_id, func.max(ticks.c.fence))
                    .where(ticks.c.job_id == "every-second")
                    .group_by(ticks.c.node_id)
                ).all()
            )
        assert fences[survivor] > fences[victim], "the successor writes under a higher fence"
    finally:
        engine.dispose()


def test_sigterm_hands_shards_over_without_waiting_for_the_ttl(make_cluster, cluster_db):
    c = make_cluster(cluster_db, shards=8, extra_args=["--ttl", "10"])
    c.ttl = 10
    for i in range(2):
        c.add(f"n{i}")
    leaders = c.wait_balanced({"n0", "n1"}, timeout_s=60)
    mine = [s for s, n in leaders.items() if n == "n0"]
    t0 = time.time()
    assert c.nodes["n0"].terminate() == 0, c.nodes["n0"].log_text()[-3000:]
    wait_until(lambda: all(c.leaders()[s] == "n1" for s in mine), 30, what="n1 to take n0's shards")
    handoff = time.time() - t0
    # A crash would cost at least 2/3 of the 10 s TTL; a resignation costs well under that.
    assert handoff < 6.0, f"handoff took {handoff:.1f}s: shards waited for the lease instead of a resignation"
    log = c.nodes["n0"].log_text()
    assert "revoked" in log and "node stopping" in log


def test_a_paused_leader_never_starts_work_after_its_successor_took_over(make_cluster, cluster_db, tmp_path):
    sink = Sink()
    sink.start()
    try:
        jobs = write_jobs(
            tmp_path / "jobs.toml",
            [
                {"id": f"ping-{i}", "every": f"{PING_EVERY_S}s", "executor": {"kind": "http", "url": sink.url + "/p"}}
                for i in range(4)
            ],
        )
        c = make_cluster(cluster_db, shards=2, extra_args=["--jobs", jobs])
        c.add("n0")
        c.wait_all_led(60, by={"n0"})
        c.add("n1")
        c.wait_balanced({"n0", "n1"}, timeout_s=60)
        leaders = c.leaders()
        victim_shard = shard_for("ping-0", 2)
        victim = leaders[victim_shard]
        survivor = ({"n0", "n1"} - {victim}).pop()
        sink.wait_for(lambda reqs: len(reqs) >= 8, 30)
        c.nodes[victim].pause()
        paused_at = time.time()
        wait_until(
            lambda: all(v == survivor for v in c.leaders().values()),
            2 * TTL + 20,
            what="the survivor to lead every shard",
        )
        time.sleep(max(0.0, paused_at + PAUSED_S - time.time()))  # the fault's length, then wake up
        c.nodes[victim].resume()
        wait_until(lambda: "session lost" in c.nodes[victim].log_text(), 30, what="the woken node to notice")
        # Give the woken node time to try whatever it would try.
        settle_until_ms = (time.time() + STALE_START_WINDOW_S) * 1000
        assert sink.wait_for(lambda reqs: any(r.received_at_ms > settle_until_ms for r in reqs), 30)

        engine = make_engine(c.db)
        try:
            with engine.connect() as conn:
                takeover = {  # shard -> (fence, when) of the survivor's first takeover
                    r.shard: (r.fence, r.raised_at_ms)
                    for r in conn.execute(
                        select(fence_log).where(fence_log.c.node_id == survivor).order_by(fence_log.c.fence.desc())
                    )
                }
            # A request from the woken node under a fence older than the takeover's,
            # received after the takeover, would be a stale leader's work.
            late = []
            for r in sink.requests():
                fence_then, when = takeover.get(int(r.header("x-shardcron-shard")), (None, None))
                if (
                    r.header("x-shardcron-node") == victim
                    and fence_then is not None
                    and int(r.header("x-shardcron-fence")) < fence_then
                    and r.received_at_ms > when
                ):
                    late.append(r)
            assert not late, f"{len(late)} executors of the paused leader started after the takeover"
            with engine.connect() as conn:
                rows = conn.execute(select(ticks.c.shard, ticks.c.fence, ticks.c.started_at_ms)).all()
            stale_writes = [
                r
                for r in rows
                if r.shard in takeover
                and r.fence < takeover[r.shard][0]
                and (r.started_at_ms or 0) > takeover[r.shard][1]
            ]
            assert not stale_writes, f"writes under an old fence landed after the takeover: {stale_writes[:3]}"
            for i in range(4):
                assert_every_slot_once(engine, f"ping-{i}")
        finally:
            engine.dispose()
        assert c.nodes[victim].alive(), "the woken node keeps running and rejoins"
    finally:
        sink.stop()


def run_node_cli(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", "node", "--listen", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "jobs_toml, expected",
    [
        ('[[jobs]]\nid = "a"\ncron = "61 * * * *"\n', "not a valid cron expression"),
        ('[[jobs]]\nid = "a"\nevery = "1s"\ntimezone = "Mars/Olympus"\n', "unknown timezone"),
        ('[[jobs]]\nid = ""\nevery = "1s"\n', "id: must be a non-empty string"),
        ('[[jobs]]\nid = "' + "x" * 257 + '"\nevery = "1s"\n', "the limit is 256"),
        ('[[jobs]]\nid = "a"\nevery = "1s"\nexecutor = { kind = "shell", command = "true" }\n', "--allow-shell"),
        ('[[jobs]]\nid = "a"\nevery = "0s"\n', "interval must be positive"),
        ("[[jobs]\n", "not valid TOML"),
        (
            '[[jobs]]\nid = "a"\nevery = "1m"\njitter = "abc"\nexecutor = { kind = "noop" }\n',
            "job 'a': jitter: expected a duration",
        ),
        (
            '[[jobs]]\nid = "a"\nevery = "1m"\njitter = "1m"\nexecutor = { kind = "noop" }\n',
            "job 'a': jitter: 1m is not shorter than the schedule's shortest gap (1m)",
        ),
    ],
)
def test_bad_jobs_file_is_refused_with_a_clear_error(tmp_path, jobs_toml, expected, etcd_server):
    path = tmp_path / "jobs.toml"
    path.write_text(jobs_toml)
    out = run_node_cli(["--etcd", etcd_server.endpoints, "--db", f"sqlite:///{tmp_path}/x.db", "--jobs", str(path)])
    assert out.returncode != 0
    assert expected in out.stderr
    assert "Traceback" not in out.stderr


def test_unreachable_etcd_at_start_up_names_the_endpoint(tmp_path):
    from shardcron.dev.testing.etcd_server import free_port

    port = free_port()
    out = run_node_cli(["--etcd", f"127.0.0.1:{port}", "--db", f"sqlite:///{tmp_path}/x.db", "--ttl", "3"])
    assert out.returncode != 0
    assert f"127.0.0.1:{port}" in out.stderr and "Traceback" not in out.stderr


def test_unreachable_database_at_start_up_names_it_without_the_password(etcd_server):
    out = run_node_cli(
        ["--etcd", etcd_server.endpoints, "--db", "postgresql://bob:s3cret@127.0.0.1:1/db", "--store-wait", "0"]
    )
    assert out.returncode != 0
    assert "127.0.0.1:1" in out.stderr and "s3cret" not in out.stderr and "Traceback" not in out.stderr


def test_a_node_with_another_shard_count_refuses_to_start(etcd_server, etcd_prefix, tmp_path):
    db = f"sqlite:///{tmp_path}/x.db"
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 8, TTL, str(tmp_path))
    try:
        c.add("n0")
        c.wait_all_led(60)
        out = run_node_cli(["--etcd", etcd_server.endpoints, "--db", db, "--prefix", etcd_prefix, "--shards", "16"])
        assert out.returncode != 0
        assert "8 shards" in out.stderr and "--shards 16" in out.stderr and "Traceback" not in out.stderr
    finally:
        c.stop_all()


def test_sigint_and_sigterm_both_stop_cleanly(etcd_server, etcd_prefix, tmp_path):
    db = f"sqlite:///{tmp_path}/x.db"
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 4, TTL, str(tmp_path))
    try:
        n = c.add("n0")
        c.wait_all_led(60)
        n.signal(signal.SIGINT)
        assert n.proc.wait(30) == 0
        wait_until(lambda: all(v is None for v in c.leaders().values()), 10, what="the leader keys to go")
    finally:
        c.stop_all()


def test_shards_says_clearly_when_etcd_is_unreachable():
    from shardcron.dev.testing.etcd_server import free_port

    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "shards", "--etcd", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert f"127.0.0.1:{port}" in out.stderr and "Traceback" not in out.stderr


def test_shards_works_with_no_node_running(etcd_server, etcd_prefix):
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "shards", "--etcd", etcd_server.endpoints, "--prefix", etcd_prefix],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "no cluster under" in out.stdout


def _shardcron(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcron", *args], capture_output=True, text=True, timeout=60)


def test_drain_hands_every_shard_over_then_undo_takes_them_back(make_cluster, fresh_db_url, etcd_server):
    c = make_cluster(fresh_db_url("sqlite"), shards=8)
    c.add("n0")
    c.add("n1")
    c.wait_balanced({"n0", "n1"}, 60)
    out = _shardcron("drain", "n0", "--etcd", etcd_server.endpoints, "--prefix", c.prefix)
    assert out.returncode == 0, out.stderr
    c.wait_all_led(2 * TTL + 30, by={"n1"})
    nodes = json.loads(_shardcron("nodes", "--etcd", etcd_server.endpoints, "--prefix", c.prefix, "--json").stdout)
    assert {n["node"]: n["draining"] for n in nodes} == {"n0": True, "n1": False}
    assert c.nodes["n0"].alive(), "a drained node stays up as a non-candidate"
    view = c.shard_map()
    assert all(r["candidates"] == 1 for r in view["shards"]), "a drained node is no standby either"
    assert _shardcron("drain", "--undo", "n0", "--etcd", etcd_server.endpoints, "--prefix", c.prefix).returncode == 0
    c.wait_balanced({"n0", "n1"}, 2 * TTL + 30)


def test_a_node_refuses_a_database_schema_newer_than_it_understands(etcd_server, tmp_path):
    from sqlalchemy import text

    from shardcron.store.migrate import ensure_schema, head_revision
    from shardcron.store.schema import VERSION_TABLE

    db = f"sqlite:///{tmp_path}/future.db"
    engine = make_engine(db)
    ensure_schema(engine, auto_upgrade=True)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999_from_the_future'"))
    engine.dispose()
    out = run_node_cli(["--etcd", etcd_server.endpoints, "--db", db])
    assert out.returncode == 1
    assert "9999_from_the_future" in out.stderr and head_revision() in out.stderr and "Traceback" not in out.stderr
