"""``Etcd.watch_prefix`` against a real etcd: the contract the coordinator and the settings' watches rely on.

Each watch is a ``grpc.aio`` stream on a loop (``coordination/etcd_watch.py``):
it returns once etcd created it, delivers every change under the prefix in
order, calls ``on_error`` once when the stream ends (etcd gone, a start
revision compacted away) and nothing after ``cancel()`` or ``close()``.
"""

from __future__ import annotations

import subprocess
import threading

import pytest

from shardcron.coordination.etcd import Etcd
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import EtcdCluster
from shardcron.errors import EtcdUnavailable
from shardcron.runtime.node_loop import NodeLoop

pytestmark = pytest.mark.timeout(120)


class Seen:
    """What one watch delivered: (revision, kind, key, value, lease) per event, and its errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[int, str, str, bytes, int]] = []
        self.errors: list[str] = []

    def on_events(self, revision, events) -> None:
        with self.lock:
            self.events.extend((revision, e.kind, e.kv.key, e.kv.value, e.kv.lease) for e in events)

    def on_error(self, why: str) -> None:
        with self.lock:
            self.errors.append(why)

    def keys(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(kind, key) for _, kind, key, _, _ in self.events]


@pytest.fixture
def etcd(etcd_server):
    client = Etcd(etcd_server.endpoints, timeout_s=3.0)
    yield client
    client.close()


def test_a_watch_delivers_every_change_under_its_prefix_in_order_from_its_start_revision(etcd, etcd_prefix):
    before = etcd.put(f"{etcd_prefix}/a", b"0")  # before the start revision: not delivered
    lease, _ = etcd.grant(30)
    seen = Seen()
    cancel = etcd.watch_prefix(f"{etcd_prefix}/", before + 1, seen.on_events, seen.on_error)
    try:
        etcd.put(f"{etcd_prefix}/b", b"1", lease=lease)
        etcd.put(f"{etcd_prefix}-other/c", b"x")  # beside the prefix, not under it
        etcd.delete(f"{etcd_prefix}/a")
        last = etcd.put(f"{etcd_prefix}/b", b"2")
        wait_until(lambda: len(seen.keys()) >= 3, 30, what="three events")
        assert seen.keys() == [("put", f"{etcd_prefix}/b"), ("delete", f"{etcd_prefix}/a"), ("put", f"{etcd_prefix}/b")]
        first, _, last_event = seen.events
        assert first[3:] == (b"1", lease)
        assert last_event[0] == last and last_event[3] == b"2"
        assert seen.errors == []
    finally:
        cancel()
        etcd.revoke(lease)


def test_a_cancelled_watch_delivers_nothing_more_and_reports_no_error(etcd, etcd_prefix):
    seen = Seen()
    revision = etcd.put(f"{etcd_prefix}/x", b"0")
    cancel = etcd.watch_prefix(f"{etcd_prefix}/", revision + 1, seen.on_events, seen.on_error)
    etcd.put(f"{etcd_prefix}/x", b"1")
    wait_until(lambda: seen.keys(), 30, what="the first event")
    cancel()
    cancel()  # a second cancel does nothing
    etcd.put(f"{etcd_prefix}/x", b"2")
    # A second watch on the same prefix sees the later put: once it has, the cancelled one had its chance.
    later = Seen()
    cancel_later = etcd.watch_prefix(f"{etcd_prefix}/", revision + 1, later.on_events, later.on_error)
    try:
        wait_until(lambda: len(later.keys()) >= 2, 30, what="the second watch to see both puts")
    finally:
        cancel_later()
    assert len(seen.keys()) == 1 and seen.errors == []


def test_a_start_revision_compacted_away_ends_the_watch_with_one_error(etcd_server, etcd, etcd_prefix):
    old = etcd.put(f"{etcd_prefix}/k", b"0")
    now = etcd.put(f"{etcd_prefix}/k", b"1")
    subprocess.run(
        ["etcdctl", f"--endpoints={etcd_server.endpoints}", "compact", str(now)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    seen = Seen()
    # etcd creates the watch, then says at once that its start is compacted: the caller re-reads from now.
    etcd.watch_prefix(f"{etcd_prefix}/", old, seen.on_events, seen.on_error)
    wait_until(lambda: seen.errors, 30, what="the watch to end")
    [why] = seen.errors
    assert "compacted" in why and seen.events == [], (why, seen.events)


def test_a_watch_whose_etcd_goes_away_reports_one_error_and_a_new_watch_is_refused_until_it_is_back(tmp_path):
    cluster = EtcdCluster(1).start()
    etcd = Etcd(cluster.endpoints, timeout_s=2.0)
    try:
        seen = Seen()
        revision = etcd.put("/w/k", b"0")
        etcd.watch_prefix("/w/", revision + 1, seen.on_events, seen.on_error)
        cluster.kill(cluster.members[0])
        wait_until(lambda: seen.errors, 30, what="the watch to report its stream's end")
        with pytest.raises(EtcdUnavailable, match="etcd watch at"):
            etcd.watch_prefix("/w/", revision + 1, seen.on_events, seen.on_error)
        assert len(seen.errors) == 1, seen.errors
    finally:
        etcd.close()
        cluster.stop()


def test_a_watch_refused_by_a_dead_member_moves_the_client_to_a_live_one(etcd_cluster3):
    etcd = Etcd(etcd_cluster3.endpoints, timeout_s=1.0)
    writer = Etcd(etcd_cluster3.endpoints, timeout_s=3.0)
    try:
        revision = etcd.put("/moved/k", b"0")
        in_use = etcd._client._current_endpoint_label
        etcd_cluster3.kill(next(m for m in etcd_cluster3.members if m.endpoint == in_use))
        seen = Seen()

        def watched() -> bool:  # only watches are asked of this client: nothing else moves it
            try:
                etcd.watch_prefix("/moved/", revision + 1, seen.on_events, seen.on_error)
            except EtcdUnavailable:
                return False
            return True

        wait_until(watched, 60, 0.1, "a watch created through a live member")
        assert etcd._client._current_endpoint_label != in_use
        wait_until(lambda: writer.put("/moved/k", b"1") or True, 60, 0.1, "a write through a live member")
        wait_until(lambda: ("put", "/moved/k") in seen.keys(), 30, what="the write to reach the watch")
    finally:
        etcd.close()
        writer.close()


def test_watches_run_on_the_loop_they_are_given_and_a_client_without_one_closes_its_own(etcd_server, etcd_prefix):
    loop = NodeLoop("given")
    given = Etcd(etcd_server.endpoints, timeout_s=3.0, loop=loop)
    own = Etcd(etcd_server.endpoints, timeout_s=3.0)
    threads: dict[str, str] = {}
    cancels = []
    try:
        revision = given.put(f"{etcd_prefix}/k", b"0")
        for name, client in (("given", given), ("own", own)):
            cancels.append(
                client.watch_prefix(
                    f"{etcd_prefix}/",
                    revision,
                    lambda _r, _e, name=name: threads.setdefault(name, threading.current_thread().name),
                    lambda _why: None,
                )
            )
        wait_until(lambda: len(threads) == 2, 30, what="both watches to deliver")
        assert threads == {"given": "given", "own": "etcd-watch"}
    finally:
        given.close()
        own.close()
    assert loop.running  # the client does not close a loop it was given
    assert not any(t.name == "etcd-watch" and t.is_alive() for t in threading.enumerate())
    loop.close()
    for cancel in cancels:  # after everything closed: nothing to cancel, and nothing raised
        cancel()
    with pytest.raises(EtcdUnavailable, match="closed"):
        own.watch_prefix(f"{etcd_prefix}/", revision, lambda _r, _e: None, lambda _why: None)
