"""``shardcron dev``: a local cluster with demo jobs, for a first look (what ``make dev`` runs).

It starts an etcd in a temporary directory, a SQLite store, an HTTP sink and
three nodes on three ports, loads a few demo jobs, prints the shard map and
then streams the ticks as they are recorded. Ctrl-C stops everything and
leaves no process behind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime

from shardcron.errors import ShardcronError

DEMO_JOBS = """\
# Demo jobs for `shardcron dev`.
[[jobs]]
id = "heartbeat"
every = "1s"
executor = {{ kind = "noop" }}

[[jobs]]
id = "ping-sink"
every = "5s"
executor = {{ kind = "http", url = "{sink}/ping", method = "POST", body = "hello from shardcron" }}

[[jobs]]
id = "tokyo-quarter-minute"
cron = "*/15 * * * * *"
timezone = "Asia/Tokyo"
executor = {{ kind = "noop" }}
"""


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=3, help="node processes to start (default %(default)s)")
    p.add_argument("--shards", type=int, default=16, help="shard count (default %(default)s)")
    p.add_argument("--ttl", type=int, default=5, help="session TTL in seconds (default %(default)s)")
    p.add_argument("--base-port", type=int, default=7071, help="first node's gRPC port (default %(default)s)")
    p.add_argument("--sink-port", type=int, default=8089, help="demo HTTP sink port (default %(default)s)")
    p.add_argument("--dir", default=None, help="working directory (default: a new temporary one)")
    p.add_argument("--for-seconds", type=float, default=None, help="stop by itself after this long")


def _fmt(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


def main(a: argparse.Namespace) -> int:
    from shardcron.devsink import Sink
    from shardcron.testing.cluster import Cluster, wait_until
    from shardcron.testing.etcd_server import EtcdCluster, port_open

    workdir = a.dir or tempfile.mkdtemp(prefix="shardcron-dev-")
    os.makedirs(workdir, exist_ok=True)
    busy = [p for p in range(a.base_port, a.base_port + a.nodes) if port_open("127.0.0.1", p)]
    if busy:
        raise ShardcronError(f"port(s) {busy} already in use: is another `shardcron dev` running? (or pass --base-port)")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    etcd = EtcdCluster(1, base_dir=os.path.join(workdir, "etcd"))
    sink = Sink()
    cluster = None
    try:
        etcd.start()
        sink.start(port=a.sink_port)
        db_path = os.path.join(workdir, "shardcron.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                os.remove(db_path + suffix)
        db = f"sqlite:///{db_path}"
        jobs_path = os.path.join(workdir, "jobs.toml")
        with open(jobs_path, "w") as f:
            f.write(DEMO_JOBS.format(sink=sink.url.rstrip("/")))
        cluster = Cluster(etcd.endpoints, db, "/cron", a.shards, a.ttl, workdir, extra_args=["--jobs", jobs_path])
        for i in range(a.nodes):
            cluster.add(f"node-{i + 1}", port=a.base_port + i)
        print(f"shardcron dev: etcd at {etcd.endpoints}, store {db}, sink {sink.url}, logs in {workdir}")
        members = {f"node-{i + 1}" for i in range(a.nodes)}
        leaders = wait_until(lambda: stop.is_set() or cluster.wait_balanced(members, 0.5), 90, 0.2,
                             "the shards to be balanced over the nodes")
        if stop.is_set():
            return 0
        from shardcron.cli import cmd_shards

        cmd_shards(argparse.Namespace(etcd=etcd.endpoints, prefix="/cron", json=False))
        first = f"127.0.0.1:{a.base_port}"
        print(f"\nTry, from another terminal:\n  shardcron shards --etcd {etcd.endpoints}\n"
              f"  grpcurl -plaintext {first} list\n\nStreaming ticks (Ctrl-C stops everything):")
        _stream_ticks(db, stop, a.for_seconds, leaders)
        return 0
    finally:
        print("\nstopping the nodes, the sink and etcd ...", file=sys.stderr)
        if cluster:
            cluster.stop_all()
        sink.stop()
        etcd.stop()
        if a.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _stream_ticks(db: str, stop: threading.Event, for_seconds: float | None, leaders) -> None:
    from sqlalchemy import select

    from shardcron.store.engine import make_engine
    from shardcron.store.schema import ticks

    engine = make_engine(db)
    deadline = time.monotonic() + for_seconds if for_seconds else None
    seen_through = 0
    try:
        while not stop.wait(0.5):
            if deadline and time.monotonic() > deadline:
                break
            with engine.connect() as conn:
                rows = conn.execute(
                    select(ticks).where(ticks.c.finished_at_ms > seen_through).order_by(ticks.c.finished_at_ms)
                ).mappings().all()
            for r in rows:
                seen_through = max(seen_through, r["finished_at_ms"])
                late = (r["started_at_ms"] - r["scheduled_at_ms"]) if r["started_at_ms"] else None
                print(f"{_fmt(r['scheduled_at_ms'])}  {r['job_id']:<22} shard={r['shard']:<3} node={r['node_id']:<8} "
                      f"fence={r['fence']:<5} {r['status']:<9} late={late if late is not None else '-'}ms"
                      + (f" http={r['http_status']}" if r["http_status"] else ""), flush=True)
    finally:
        engine.dispose()
