"""Failure notifications on real node processes over real etcd and PostgreSQL: an on_failure webhook
fires once per failed slot across a SIGKILL of the shard's leader, on_recovery once when the job
recovers, the default notification is rate limited with the rest recorded suppressed, and the audit
is clean (and would name a failed slot left without its notification)."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from shardcron import Client
from shardcron.audit import FindingKind, run_audit
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.leader.notifier import POLL_S, RESEND_CHECK_S
from shardcron.model import TickStatus
from shardcron.rules.notifications import NotificationKind, owed_in
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from shardcron.store import make_engine
from shardcron.store import notifications as notification_store
from shardcron.store.schema import notifications
from shardcron.store.tick_reads import list_ticks
from tests.integration.node.test_metrics import scrape
from tests.support.clusters import TTL

pytestmark = pytest.mark.cluster

SHARDS = 2
FAILED = {TickStatus.FAILED, TickStatus.ABANDONED}
# The window in which a recovery sent twice would arrive: while no leadership changes, the one path that sends
# a claimed row again is the notifier's check for rows not yet recorded sent, every RESEND_CHECK_S, at its next
# pass (one at least every POLL_S); its send to the local sink takes a moment more. A fixed sleep on purpose:
# the test shows that something does not happen, and no condition marks its not happening.
SENT_AGAIN_WITHIN_S = RESEND_CHECK_S + POLL_S + 2.0


def settled_ticks(engine, job_id: str) -> list:
    """The job's ticks once every one is final (call it after pausing the job: a run may still be going)."""
    return wait_until(
        lambda: (ts := list_ticks(engine, job_id, limit=1000)) and all(t.status.is_final for t in ts) and ts,
        30,
        what=f"every tick of {job_id} final",
    )


def keys_of(sink: Sink, path: str) -> list[str]:
    return [r.header("Idempotency-Key") for r in sink.requests() if r.path == path]


def test_on_failure_fires_once_per_failed_slot_across_a_sigkill_and_on_recovery_once(fresh_db_url, make_cluster):
    db = fresh_db_url("postgresql")
    c = make_cluster(db, shards=SHARDS)
    for name in ("n0", "n1"):
        c.add(name)
    leaders = c.wait_balanced({"n0", "n1"}, timeout_s=60)
    jid = "nightly-report"
    victim = leaders[shard_for(jid, SHARDS)]
    survivor = ({"n0", "n1"} - {victim}).pop()
    engine = make_engine(db)
    with Sink() as sink, Client(c.nodes[survivor].address) as client:

        def job(path: str) -> dict:
            return {
                "id": jid,
                "every": "1s",
                "executor": {"kind": "http", "url": sink.url + path},
                "on_failure": {"kind": "http", "url": sink.url + "/failed"},
                "on_recovery": {"kind": "http", "url": sink.url + "/recovered"},
            }

        client.put_job(job_from_dict(job("/status/500")))
        wait_until(lambda: len(keys_of(sink, "/failed")) >= 3, 30, what="three failure notifications")
        c.nodes[victim].kill()
        killed_at_ms = int(time.time() * 1000)
        wait_until(lambda: c.leaders()[shard_for(jid, SHARDS)] == survivor, 2 * TTL + 15, what="the successor")
        wait_until(
            lambda: any(
                json.loads(r.body)["scheduled_at_ms"] > killed_at_ms for r in sink.requests() if r.path == "/failed"
            ),
            30,
            what="a failure notification from the successor",
        )
        client.put_job(job_from_dict(job("/ok")))
        wait_until(lambda: keys_of(sink, "/recovered"), 30, what="the recovery notification")
        wait_until(
            lambda: sum(t.status is TickStatus.SUCCEEDED for t in list_ticks(engine, jid, limit=50)) >= 3,
            30,
            what="three successes after the recovery",
        )
        client.pause_job(jid)

        ticks = settled_ticks(engine, jid)
        failed = sorted(t.scheduled_at_ms for t in ticks if t.status in FAILED)
        owed = {f"{jid}:{slot}:on_failure" for slot in failed}
        wait_until(lambda: set(keys_of(sink, "/failed")) >= owed, 30, what="every failed slot's notification")
        # Exactly once at the receiver: one distinct key per failed slot, none for any other slot;
        # a key arrives twice only if the victim died between sending and recording "sent".
        got = Counter(keys_of(sink, "/failed"))
        assert set(got) == owed
        assert sum(got.values()) - len(got) <= 1, f"resent more than the one the kill can explain: {got}"
        wait_until(
            lambda: all(n.status.value == "sent" for n in notification_store.list_for_job(engine, jid)),
            15,
            what="every row recorded sent",
        )
        # Recoveries by slot order: normally the first success after the failures; a run of the failing
        # definition that was already claimed may fail after it, and the next success recovers again.
        recoveries = [
            f"{jid}:{slot}:on_recovery"
            for slot, _ in owed_in(
                sorted(ticks, key=lambda t: t.scheduled_at_ms),
                frozenset({NotificationKind.ON_RECOVERY}),
                settled_before_ms=2**62,
            )
        ]
        assert recoveries
        wait_until(lambda: sorted(keys_of(sink, "/recovered")) == recoveries, 15, what="each recovery once")
        time.sleep(SENT_AGAIN_WITHIN_S)  # a deliberate window, not a wait: no recovery may arrive a second time in it
        assert sorted(keys_of(sink, "/recovered")) == recoveries
        body = json.loads(next(r.body for r in sink.requests() if r.path == "/failed"))
        assert body["notification"] == "on_failure" and body["status"] in ("failed", "abandoned")
        assert (
            next(r for r in sink.requests() if r.path == "/failed").header("X-Shardcron-Notification") == "on_failure"
        )

        now = int(time.time() * 1000)
        window = dict(from_ms=min(failed) - 1, to_ms=now, now_ms=now, grace_ms=1000)
        assert run_audit(engine, **window).notification_missing == []
        # A failed slot without its notification is a finding.
        with engine.begin() as conn:
            conn.execute(
                notifications.delete().where(
                    notifications.c.job_id == jid, notifications.c.scheduled_at_ms == failed[0]
                )
            )
        found = run_audit(engine, **window).notification_missing
        assert [(f.kind, f.scheduled_at_ms) for f in found] == [(FindingKind.NOTIFICATION_MISSING, failed[0])]
    engine.dispose()


def test_the_default_notification_is_rate_limited_and_the_rest_recorded_suppressed(fresh_db_url, make_cluster):
    db = fresh_db_url("postgresql")
    with Sink() as sink:
        port = free_port()
        c = make_cluster(
            db,
            shards=SHARDS,
            extra_args=[
                "--notify-on-failure",
                sink.url + "/default",
                "--notify-rate",
                "3/1h",
                "--metrics-listen",
                f"127.0.0.1:{port}",
            ],
        )
        node = c.add("solo")
        c.wait_all_led(60)
        engine = make_engine(db)
        with Client(node.address) as client:
            client.put_job(
                job_from_dict(
                    {"id": "flaky", "every": "1s", "executor": {"kind": "http", "url": sink.url + "/status/503"}}
                )
            )
            wait_until(
                lambda: [n for n in notification_store.list_for_job(engine, "flaky") if n.status.value == "suppressed"][
                    2:
                ],
                30,
                what="three suppressed notifications",
            )
            client.pause_job("flaky")
        rows = notification_store.list_for_job(engine, "flaky")
        wait_until(lambda: len(keys_of(sink, "/default")) >= 3, 20, what="the three allowed")
        assert [n.status.value for n in rows[:3]] != ["suppressed"] * 3
        assert sum(n.status.value != "suppressed" for n in rows) == 3
        assert len(set(keys_of(sink, "/default"))) == 3

        # Counted, not silently dropped: the metric says what the table holds.
        def suppressed_in_table_and_metric():
            m = scrape(port)
            rows = notification_store.list_for_job(engine, "flaky")
            counted = m.get(("shardcron_notifications_total", (("kind", "on_failure"), ("outcome", "suppressed"))))
            return m if counted == sum(n.status.value == "suppressed" for n in rows) else None

        m = wait_until(suppressed_in_table_and_metric, 15, what="the metric to count every suppressed row")
        assert m[("shardcron_notifications_total", (("kind", "on_failure"), ("outcome", "sent")))] == 3
        engine.dispose()


@pytest.mark.parametrize("point", ["before_claim", "after_send"])
def test_a_leader_killed_at_a_notification_crash_point_leaves_nothing_owed(fresh_db_url, make_cluster, point):
    """One shard, so the first node leads it; it dies (SIGKILL) the first time the job fails, before the
    notification is claimed, or after it was sent and before it is recorded sent. The successor claims
    it from the failed row, or sends the claimed row again with the same idempotency key."""
    db = fresh_db_url("postgresql")
    jid = "crashy"
    with Sink() as sink:
        c = make_cluster(db, shards=1)
        victim = c.add("victim", env={"SHARDCRON_TEST_CRASH_NOTIFY": f"{point}:{jid}"})
        c.wait_all_led(60)
        c.add("successor")
        # The job fails only after the victim's notifier swept its new leadership, so the failure
        # reaches the crash point by the live path, not by that first sweep.
        wait_until(
            lambda: "shard 0: notifications swept for fence" in victim.log_text(),
            30,
            what="the victim's notifier to sweep its leadership",
        )
        engine = make_engine(db)
        with Client(victim.address) as client:
            client.put_job(
                job_from_dict(
                    {
                        "id": jid,
                        "every": "1s",
                        "executor": {"kind": "http", "url": sink.url + "/status/500"},
                        "on_failure": {"kind": "http", "url": sink.url + "/failed"},
                    }
                )
            )
        wait_until(lambda: not victim.alive(), 30, what="the victim to reach its crash point")
        wait_until(lambda: c.leaders()[0] == "successor", 2 * TTL + 15, what="the successor to lead")
        first_failed = min(t.scheduled_at_ms for t in list_ticks(engine, jid, limit=1000) if t.status in FAILED)
        wait_until(
            lambda: f"{jid}:{first_failed}:on_failure" in keys_of(sink, "/failed"),
            30,
            what="the victim's owed notification, from the successor",
        )
        with Client(c.nodes["successor"].address) as client:
            client.pause_job(jid)
        ticks = settled_ticks(engine, jid)
        owed = {f"{jid}:{t.scheduled_at_ms}:on_failure" for t in ticks if t.status in FAILED}
        wait_until(lambda: set(keys_of(sink, "/failed")) >= owed, 30, what="every failed slot's notification")
        wait_until(
            lambda: all(n.status.value == "sent" for n in notification_store.list_for_job(engine, jid)),
            15,
            what="every row recorded sent",
        )
        got = Counter(keys_of(sink, "/failed"))
        assert set(got) == owed
        # after_send: the first one arrived twice, with the same key (a receiver drops the second).
        assert got[f"{jid}:{first_failed}:on_failure"] == (2 if point == "after_send" else 1)
        assert sum(got.values()) == len(got) + (1 if point == "after_send" else 0)
        assert "crash point: notify" in victim.log_text()
        engine.dispose()
