"""Deadlines on real node processes over real etcd and PostgreSQL: a slow slot misses its deadline
once; a leader SIGKILLed with a deadline pending leaves it to its successor, which raises it once; a
cluster stopped across a start_deadline raises it when it comes back; an acked slot does not alert;
a leader that dies between recording a miss and claiming its alert leaves the alert to its successor.

Each job here is a ``once`` job, so its one slot is known in advance and every alert is keyed by it.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from sqlalchemy import select

from shardcron import Client
from shardcron.audit import FindingKind, run_audit
from shardcron.audit.report import DeadlineMiss
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.rules.deadlines import JUDGE_GRACE_MS
from shardcron.spec.job import job_from_dict
from shardcron.store import make_engine
from shardcron.store.schema import notifications, ticks
from tests.integration.node.test_metrics import scrape
from tests.support.clusters import TTL
from tests.support.commands import node_command

pytestmark = pytest.mark.cluster


@pytest.fixture
def one_shard(fresh_db_url, make_cluster):
    """``start(first, then=(), **node_options)``: one shard on PostgreSQL, led by node ``first`` (the
    others join after it leads); returns the cluster, that node and an engine on the store."""
    engines = []

    def start(first: str, then: tuple[str, ...] = (), **node_options):
        db = fresh_db_url("postgresql")
        c = make_cluster(db, shards=1)
        node = c.add(first, **node_options)
        c.wait_all_led(60)
        for name in then:
            c.add(name)
        engines.append(make_engine(db))
        return c, node, engines[-1]

    yield start
    for engine in engines:
        engine.dispose()


def once_job(jid: str, slot_ms: int, url: str, alerts: str, **more) -> dict:
    return {
        "id": jid,
        "at_ms": slot_ms,
        "executor": {"kind": "http", "url": url},
        "on_deadline": {"kind": "http", "url": alerts},
        **more,
    }


def alert_keys(sink: Sink) -> Counter:
    return Counter(r.header("Idempotency-Key") for r in sink.requests() if r.path == "/deadline")


def missed_columns(engine, jid: str, slot_ms: int) -> dict:
    with engine.connect() as conn:
        row = conn.execute(
            select(
                ticks.c.start_deadline_missed_at_ms,
                ticks.c.deadline_missed_at_ms,
                ticks.c.heartbeat_missed_at_ms,
                ticks.c.acked_at_ms,
                ticks.c.status,
            ).where(ticks.c.job_id == jid, ticks.c.scheduled_at_ms == slot_ms)
        ).first()
    return dict(row._mapping) if row is not None else {}


def soon(seconds: float) -> int:
    """A whole second this far ahead: the slot of a once job put now."""
    return (int(time.time() * 1000) // 1000 + int(seconds)) * 1000


def test_a_slow_slot_misses_its_deadline_once_and_a_quick_one_meets_it(one_shard):
    metrics_port = free_port()
    _, node, engine = one_shard("n0", extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"])
    slot = soon(4)
    with Sink() as sink, Client(node.address) as client:
        alerts = sink.url + "/deadline"
        client.put_job(job_from_dict(once_job("slow", slot, sink.url + "/slow/5000", alerts, deadline="2s")))
        client.put_job(job_from_dict(once_job("quick", slot, sink.url + "/ok", alerts, deadline="2s")))
        wait_until(lambda: alert_keys(sink), 60, what="the slow slot's deadline alert")
        # Both were judged in one transaction, at the same due time: the quick one met its deadline.
        assert missed_columns(engine, "quick", slot)["deadline_missed_at_ms"] is None
        assert missed_columns(engine, "quick", slot)["status"] == "succeeded"
        row = missed_columns(engine, "slow", slot)
        assert row["deadline_missed_at_ms"] >= slot + 2000 + JUDGE_GRACE_MS
        # Any node lists the cluster's recent misses.
        (miss,) = client.list_deadline_misses(slot)
        assert (miss.job_id, miss.scheduled_at_ms, miss.kind) == ("slow", slot, "deadline")
        assert miss.missed_at_ms == row["deadline_missed_at_ms"]
        assert client.list_deadline_misses(miss.missed_at_ms + 1) == []
        wait_until(lambda: missed_columns(engine, "slow", slot)["status"] == "succeeded", 30, what="the slow run")
        assert alert_keys(sink) == Counter({f"slow:{slot}:deadline": 1})
        alert = next(r for r in sink.requests() if r.path == "/deadline")
        assert alert.header("X-Shardcron-Notification") == "deadline"
        body = json.loads(alert.body)
        assert body["notification"] == "deadline" and body["job_id"] == "slow" and body["scheduled_at_ms"] == slot
        # The audit reports the miss, and is clean; unrecorded, the miss (and its alert's row) is a finding.
        now = int(time.time() * 1000)
        window = dict(from_ms=slot - 1, to_ms=now, now_ms=now, grace_ms=1000)
        wait_until(lambda: not run_audit(engine, **window).notification_missing, 15, what="the alert's row")
        report = run_audit(engine, **window)
        assert report.clean(), report.findings()
        assert report.deadlines_missed == [DeadlineMiss("slow", slot, "deadline")]
        with engine.begin() as conn:
            conn.execute(notifications.delete().where(notifications.c.job_id == "slow"))
        assert [f.detail for f in run_audit(engine, **window).notification_missing] == ["deadline owed, no row"]
        with engine.begin() as conn:
            conn.execute(ticks.update().where(ticks.c.job_id == "slow").values(deadline_missed_at_ms=None))
        report = run_audit(engine, **window)
        assert [(f.kind, f.job_id, f.scheduled_at_ms) for f in report.deadline_unraised] == [
            (FindingKind.DEADLINE_UNRAISED, "slow", slot)
        ]
        assert report.deadlines_missed == [] and not report.clean()
        counted = scrape(metrics_port)
        assert (
            counted[
                ("shardcron_deadline_missed_total", (("job", "slow"), ("kind", "deadline"), ("namespace", "default")))
            ]
            == 1
        )
        assert (
            "shardcron_deadline_missed_total",
            (("job", "quick"), ("kind", "deadline"), ("namespace", "default")),
        ) not in counted


def test_a_leader_killed_with_a_deadline_pending_leaves_it_to_its_successor_which_raises_it_once(one_shard):
    c, victim, engine = one_shard("victim", then=("successor",))
    slot = soon(4)
    with Sink() as sink:
        with Client(victim.address) as client:
            client.put_job(
                job_from_dict(once_job("long", slot, sink.url + "/slow/60000", sink.url + "/deadline", deadline="6s"))
            )
        wait_until(lambda: any(r.path.startswith("/slow") for r in sink.requests()), 30, what="the run to start")
        victim.kill()  # the run is going, its deadline 6 s after the slot not come yet
        wait_until(lambda: c.leaders()[0] == "successor", 2 * TTL + 15, what="the successor to lead")
        wait_until(lambda: alert_keys(sink), 60, what="the deadline alert, from the successor")
        row = missed_columns(engine, "long", slot)
        assert row["deadline_missed_at_ms"] is not None
        assert alert_keys(sink) == Counter({f"long:{slot}:deadline": 1})
        alert = next(r for r in sink.requests() if r.path == "/deadline")
        assert alert.header("X-Shardcron-Node") == "successor"


def test_a_cluster_stopped_across_a_start_deadline_raises_it_when_it_comes_back(one_shard):
    _, node, engine = one_shard("n0")
    slot = soon(8)
    with Sink() as sink:
        with Client(node.address) as client:
            client.put_job(
                job_from_dict(once_job("nightly", slot, sink.url + "/ok", sink.url + "/deadline", start_deadline="2s"))
            )
        node.terminate()
        # The whole cluster is down while the slot and its start deadline pass.
        wait_until(lambda: time.time() * 1000 > slot + 2000 + JUDGE_GRACE_MS + 1000, 60, what="the deadline to pass")
        assert not alert_keys(sink)
        node.start()
        wait_until(lambda: alert_keys(sink), 60, what="the start_deadline alert after the restart")
        assert alert_keys(sink) == Counter({f"nightly:{slot}:start_deadline": 1})
        row = wait_until(
            lambda: (r := missed_columns(engine, "nightly", slot)) and r["status"] == "succeeded" and r,
            30,
            what="the caught-up run",
        )
        assert row["start_deadline_missed_at_ms"] is not None


def test_an_acked_slot_does_not_alert_and_one_not_acked_does(one_shard):
    _, node, engine = one_shard("n0")
    slot = soon(3)
    with Sink() as sink, Client(node.address) as client:
        for jid in ("acked", "silent"):
            client.put_job(
                job_from_dict(
                    once_job(jid, slot, sink.url + "/ok", sink.url + "/deadline", heartbeat="4s", deadline="4s")
                )
            )
        wait_until(lambda: missed_columns(engine, "acked", slot).get("status") == "succeeded", 30, what="the run")
        # The command line acks the newest slot; an ack from the client after it changes nothing.
        out = node_command(node, "jobs", "ack", "acked", "--json")
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        first = json.loads(out.stdout)
        assert (first["scheduled_at_ms"], first["already"]) == (slot, False)
        again = client.ack_tick("acked", slot)
        assert (again.acked_at_ms, again.already) == (first["acked_at_ms"], True)
        wait_until(lambda: len(alert_keys(sink)) >= 2, 60, what="the silent slot's heartbeat and deadline alerts")
        # Judged with the silent one, in the same transactions: the acked slot met both.
        acked = missed_columns(engine, "acked", slot)
        assert acked["acked_at_ms"] == first["acked_at_ms"]
        assert acked["heartbeat_missed_at_ms"] is None and acked["deadline_missed_at_ms"] is None
        assert alert_keys(sink) == Counter({f"silent:{slot}:heartbeat": 1, f"silent:{slot}:deadline": 1})
        # The API's ticks say it too.
        assert sorted(client.list_ticks("silent")[0].missed_deadlines) == ["deadline", "heartbeat"]
        assert client.list_ticks("acked")[0].acked_at_ms == first["acked_at_ms"]
        refused = node_command(node, "jobs", "ack", "silent", str(slot + 1))
        assert refused.returncode != 0 and "no tick of a slot at" in refused.stderr
        assert "Traceback" not in refused.stderr


def test_a_leader_that_dies_before_claiming_a_deadline_alert_leaves_it_to_its_successor(one_shard):
    c, victim, engine = one_shard(
        "victim", then=("successor",), env={"SHARDCRON_TEST_CRASH_NOTIFY": "before_claim:late"}
    )
    slot = soon(4)
    with Sink() as sink:
        with Client(victim.address) as client:
            client.put_job(
                job_from_dict(once_job("late", slot, sink.url + "/slow/4000", sink.url + "/deadline", deadline="1s"))
            )
        wait_until(lambda: not victim.alive(), 60, what="the victim to die before claiming the alert")
        assert missed_columns(engine, "late", slot)["deadline_missed_at_ms"] is not None  # recorded, not claimed
        assert "crash point: notify" in victim.log_text()
        wait_until(lambda: c.leaders()[0] == "successor", 2 * TTL + 15, what="the successor to lead")
        wait_until(lambda: alert_keys(sink), 60, what="the alert, from the successor's sweep")
        assert alert_keys(sink) == Counter({f"late:{slot}:deadline": 1})


def test_an_alert_whose_receiver_is_down_arrives_once_it_is_back(one_shard):
    """The alert's receiver refuses connections when the miss is found: its three sends fail, the
    notification stays claimed and is tried again 10 s later, when the receiver answers."""
    _, node, engine = one_shard("n0")
    alerts_port = free_port()
    slot = soon(3)
    with Sink() as sink, Client(node.address) as client:
        client.put_job(
            job_from_dict(
                once_job(
                    "offline", slot, sink.url + "/slow/3000", f"http://127.0.0.1:{alerts_port}/deadline", deadline="1s"
                )
            )
        )
        wait_until(
            lambda: "deadline of offline@" in node.log_text() and "trying again in 10 s" in node.log_text(),
            60,
            what="the alert's first round of sends to fail",
        )
        receiver = Sink()
        receiver.start(port=alerts_port)
        try:
            wait_until(lambda: alert_keys(receiver), 60, what="the alert, once its receiver is back")
            assert alert_keys(receiver) == Counter({f"offline:{slot}:deadline": 1})
            alert = next(r for r in receiver.requests() if r.path == "/deadline")
            assert int(alert.header("X-Shardcron-Attempt")) == 4  # after the first round's three
            row = wait_until(
                lambda: (n := notification_row(engine, "offline")) and n.status == "sent" and n,
                15,
                what="the row recorded sent",
            )
            assert row.attempts == 4 and row.error is None
        finally:
            receiver.stop()


def notification_row(engine, jid: str):
    with engine.connect() as conn:
        return conn.execute(
            select(notifications.c.status, notifications.c.attempts, notifications.c.error).where(
                notifications.c.job_id == jid
            )
        ).first()
