"""A node's copy of the namespaces' settings (real etcd, real SQLite): loaded before the scheduler runs,
reloaded when another node bumps the key after a write, and by the periodic backstop when the bump is
missed; a reload that finds nothing changed hands the scheduler nothing."""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest

from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.namespace_watch import NamespaceWatch
from shardcron.coordination.store_watch import StoreWatch, WatchTask
from shardcron.dev.testing.cluster import wait_until
from shardcron.errors import StoreUnavailable
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.rules.quotas import Quota
from shardcron.store import ensure_schema, make_engine
from shardcron.store import namespaces as ns


@pytest.fixture
def engine(tmp_path):
    e = make_engine(f"sqlite:///{tmp_path}/store.db")
    ensure_schema(e, auto_upgrade=True)
    yield e
    e.dispose()


@pytest.fixture
def etcd(etcd_server):
    client = Etcd(etcd_server.endpoints, timeout_s=3.0)
    yield client
    client.close()


class Applied:
    """What the watch handed the scheduler, each time."""

    def __init__(self):
        self.calls: list[dict] = []
        self.changed = threading.Event()

    def __call__(self, settings: dict) -> None:
        self.calls.append(settings)
        self.changed.set()


def test_a_write_on_another_node_reaches_this_one_through_the_bump(engine, etcd, etcd_prefix):
    layout = KeyLayout(etcd_prefix)
    here, there = Applied(), Applied()
    # A periodic reload far beyond the test: only the bump can bring the change in time.
    watch = NamespaceWatch(etcd, layout, engine, here, reload_s=3600)
    other = NamespaceWatch(etcd, layout, engine, there, reload_s=3600)
    watch.load_now()
    assert [set(c) for c in here.calls] == [{"default"}]  # the first load, before any shard is led
    watch.start()
    other.start()
    try:
        wait_until(lambda: len(there.calls) == 1, 30, what="the other node's first load")
        ns.create_namespace(engine, "team-a", NamespaceSettings(3.0, Quota(max_running=2)), node_id="b", now_ms=1)
        other.bump("team-a", 1)
        wait_until(lambda: "team-a" in here.calls[-1], 30, what="the bump reloaded on this node")
        assert here.calls[-1]["team-a"] == NamespaceSettings(3.0, Quota(max_running=2))
        ns.update_namespace(engine, "team-a", quota={"max_slots_per_second": Fraction(1, 3)}, node_id="b", now_ms=2)
        other.bump("team-a", 2)
        wait_until(
            lambda: here.calls[-1]["team-a"].quota.max_slots_per_second == Fraction(1, 3),
            30,
            what="the update reloaded",
        )
        calls, reloads = len(here.calls), watch.reloads
        other.bump("team-a", 3)  # nothing changed in the store: the scheduler is not bothered
        wait_until(lambda: watch.reloads > reloads, 30, what="the reload the bump brings")
        assert len(here.calls) == calls
        assert watch.current["team-a"].quota.max_running == 2
    finally:
        watch.stop()
        other.stop()


def test_a_missed_bump_is_caught_by_the_periodic_reload(engine, etcd, etcd_prefix):
    applied = Applied()
    watch = NamespaceWatch(etcd, KeyLayout(etcd_prefix), engine, applied, reload_s=0.5)
    watch.load_now()
    watch.start()
    try:
        ns.create_namespace(engine, "quiet", NamespaceSettings(), node_id="b", now_ms=1)  # no bump
        wait_until(lambda: "quiet" in applied.calls[-1], 30, what="the periodic reload")
    finally:
        watch.stop()


def test_a_failing_reload_keeps_the_copy_and_the_watch_alive(etcd, etcd_prefix):
    attempts: list[str] = []
    reloaded = threading.Event()

    class Things(StoreWatch):
        def reload(self, cause: str) -> None:
            attempts.append(cause)
            if len(attempts) == 1:
                raise StoreUnavailable("the store is away")
            reloaded.set()

    w = Things(etcd, f"{etcd_prefix}/things", "things", reload_s=3600)
    w.start()
    try:
        wait_until(lambda: attempts, 30, what="the first reload")
        w.bump("x", 1)
        assert reloaded.wait(30)
        assert attempts[:2] == ["start", "watch"]
    finally:
        w.stop()


def test_watches_sharing_one_task_reload_each_on_its_own_bump_and_period(etcd, etcd_prefix):
    """A node's calendars and namespaces share one ``WatchTask``: a bump reloads the watch it names and
    no other, and each keeps its own period."""
    seen: dict[str, list[str]] = {"slow": [], "bumped": [], "fast": []}

    class Recorded(StoreWatch):
        def reload(self, cause: str) -> None:
            seen[self._what].append(cause)

    runner = WatchTask("settings")
    slow = Recorded(etcd, f"{etcd_prefix}/slow", "slow", reload_s=3600)
    bumped = Recorded(etcd, f"{etcd_prefix}/bumped", "bumped", reload_s=3600)
    fast = Recorded(etcd, f"{etcd_prefix}/fast", "fast", reload_s=0.2)
    for w in (slow, bumped, fast):
        w.start(runner)
    runner.start()
    try:
        wait_until(lambda: all(seen.values()), 30, what="every watch's first reload")
        bumped.bump("x", 1)
        wait_until(lambda: "watch" in seen["bumped"], 30, what="the bumped watch's reload")
        wait_until(lambda: seen["fast"].count("periodic") >= 3, 30, what="the fast watch's periodic reloads")
        assert seen["slow"] == ["start"]  # neither the bump nor the other's period reloaded it
        assert seen["bumped"] == ["start", "watch"]
    finally:
        runner.stop()
        for w in (slow, bumped, fast):
            w.stop()
