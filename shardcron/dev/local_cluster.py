"""``shardcron dev``: a local cluster with demo jobs, for a first look (what ``make dev`` runs).

It starts an etcd in a temporary directory, a SQLite store, an HTTP sink and
three nodes on three ports, loads a few demo jobs, prints the shard map, the
variables that point the other commands at this cluster, and then streams the
ticks as they are recorded. Ctrl-C stops everything and leaves no process
behind; the nodes' logs and the store stay in the directory it announced.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from shardcron.cli.common import fmt_clock_ms
from shardcron.errors import ShardcronError


DEMO_REDIS = "redis://127.0.0.1:6379/0"
DEMO_STREAM = "shardcron:demo"


def demo_jobs(sink_url: str, *, redis: bool = False) -> list[dict]:
    """What `make dev` submits through the API: a noop every second, an HTTP call, a cron job in Tokyo,
    and, when a Redis answers on 127.0.0.1:6379, one entry per slot added to a Redis stream."""
    jobs = [
        {"id": "heartbeat", "every": "1s", "executor": {"kind": "noop"}, "labels": {"demo": "yes"}},
        {"id": "ping-sink", "every": "5s", "labels": {"demo": "yes"},
         "executor": {"kind": "http", "url": f"{sink_url}/ping", "method": "POST", "body": "hello from shardcron"}},
        {"id": "tokyo-quarter-minute", "cron": "*/15 * * * * *", "timezone": "Asia/Tokyo",
         "executor": {"kind": "noop"}, "labels": {"demo": "yes"}},
    ]
    if redis:
        jobs.append({"id": "to-redis-stream", "every": "5s", "labels": {"demo": "yes"},
                     "executor": {"kind": "redis-stream", "url": DEMO_REDIS, "stream": DEMO_STREAM,
                                  "fields": {"report": "daily"}, "maxlen": 1000}})
    return jobs


def register(sub) -> None:
    """Add ``dev`` to the ``shardcron`` command."""
    dev = sub.add_parser("dev", help="run a local 3-node cluster with demo jobs (what `make dev` runs)")
    add_flags(dev)
    dev.set_defaults(func=main)


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=3, help="node processes to start (default %(default)s)")
    p.add_argument("--shards", type=int, default=16, help="shard count (default %(default)s)")
    p.add_argument("--ttl", type=int, default=5, help="session TTL in seconds (default %(default)s)")
    p.add_argument("--base-port", type=int, default=7071, help="first node's gRPC port (default %(default)s)")
    p.add_argument("--sink-port", type=int, default=8089, help="demo HTTP sink port (default %(default)s)")
    p.add_argument("--http-base-port", type=int, default=8081,
                   help="first node's dashboard port; 0: no dashboard (default %(default)s)")
    p.add_argument("--dir", default=None, help="working directory (default: a new temporary one)")
    p.add_argument("--for-seconds", type=float, default=None, help="stop by itself after this long")


def main(a: argparse.Namespace) -> int:
    from shardcron.dev.sink import Sink
    from shardcron.dev.testing.cluster import Cluster, wait_until
    from shardcron.dev.testing.etcd_server import EtcdCluster, port_open

    for flag, value, minimum in (("--nodes", a.nodes, 1), ("--shards", a.shards, 1), ("--ttl", a.ttl, 2)):
        if value < minimum:
            raise ShardcronError(f"{flag}: must be at least {minimum}, got {value}")
    if a.for_seconds is not None and not a.for_seconds > 0:
        raise ShardcronError(f"--for-seconds: must be more than 0, got {a.for_seconds:g}")
    workdir = a.dir or tempfile.mkdtemp(prefix="shardcron-dev-")
    os.makedirs(workdir, exist_ok=True)
    dashboards = [a.http_base_port + i for i in range(a.nodes)] if a.http_base_port else []
    busy = [p for p in [*range(a.base_port, a.base_port + a.nodes), *dashboards] if port_open("127.0.0.1", p)]
    if busy:
        raise ShardcronError(f"port(s) {busy} already in use: is another `shardcron dev` running? "
                             "(or pass --base-port / --http-base-port)")
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
        cluster = Cluster(etcd.endpoints, db, "/cron", a.shards, a.ttl, workdir)
        for i in range(a.nodes):
            cluster.add(f"node-{i + 1}", port=a.base_port + i,
                        extra_args=["--http-listen", f"127.0.0.1:{dashboards[i]}"] if dashboards else [])
        print(f"shardcron dev: etcd at {etcd.endpoints}, store {db}, sink {sink.url}, logs in {workdir}")
        members = {f"node-{i + 1}" for i in range(a.nodes)}
        wait_until(lambda: stop.is_set() or cluster.wait_balanced(members, 0.5), 90, 0.2,
                             "the shards to be balanced over the nodes")
        if stop.is_set():
            return 0
        from shardcron.api.client import Client
        from shardcron.jobspec import job_from_dict

        servers = [f"127.0.0.1:{a.base_port + i}" for i in range(a.nodes)]
        client = Client(servers)
        redis = port_open("127.0.0.1", 6379)
        for d in demo_jobs(sink.url.rstrip("/"), redis=redis):
            job = client.put_job(job_from_dict(d))
            print(f"submitted {job.id} (version {job.version}) through {servers[0]}")
        from shardcron.cli import cmd_shards

        cmd_shards(argparse.Namespace(etcd=etcd.endpoints, prefix="/cron", json=False, etcd_ca=None,
                                      etcd_cert=None, etcd_key=None, etcd_user=None, etcd_password_file=None))
        print("\nTry, from another terminal (.venv/bin is on PATH after `. .venv/bin/activate`):\n"
              + "".join(f"  export {name}={value}\n" for name, value in cluster_env(servers[0], etcd.endpoints, db))
              + f"  shardcron jobs put hello --every 10s --http {sink.url.rstrip('/')}/hello\n"
              "  shardcron jobs list\n"
              "  shardcron ticks heartbeat --limit 5\n"
              "  shardcron shards\n"
              "  shardcron nodes\n"
              "  shardcron audit\n"
              + (f"  redis-cli XREVRANGE {DEMO_STREAM} + - COUNT 3   # one entry per slot, never two\n"
                 if redis else "")
              + f"  grpcurl -plaintext {servers[0]} list\n"
              + "".join(f"\nDashboard of node-{i + 1}: http://127.0.0.1:{port}/" for i, port in enumerate(dashboards))
              + ("\n" if dashboards else "")
              + f"\nStreaming ticks (Ctrl-C stops everything; logs and the store stay in {workdir}):", flush=True)
        _stream_ticks(client, stop, a.for_seconds)
        client.close()
        return 0
    finally:
        print("\nstopping the nodes, the sink and etcd ...", file=sys.stderr)
        if cluster:
            cluster.stop_all()
        sink.stop()
        etcd.stop()
        # The logs stay where the start-up line said they are: after a surprise
        # they are what a newcomer reads. etcd's data (preallocated WAL files of
        # tens of MB) does not, unless the caller chose the directory.
        if a.dir is None:
            shutil.rmtree(os.path.join(workdir, "etcd"), ignore_errors=True)
        print(f"logs and the store are kept in {workdir} (remove it when done)", file=sys.stderr)


def cluster_env(server: str, etcd_endpoints: str, db: str) -> list[tuple[str, str]]:
    """The variables that point `shardcron jobs/ticks` (the API), `shards`/`nodes` (etcd) and `audit` (the
    store) at this cluster: etcd runs on a port of its own, so the defaults would find nothing."""
    return [("SHARDCRON_SERVER", server), ("SHARDCRON_ETCD", etcd_endpoints), ("SHARDCRON_DB", db)]


def _stream_ticks(client, stop: threading.Event, for_seconds: float | None) -> None:
    """Print every tick result as WatchTicks delivers it, until Ctrl-C or ``for_seconds``."""
    watch = client.watch_ticks()
    deadline = threading.Timer(for_seconds, stop.set) if for_seconds else None
    if deadline:
        deadline.daemon = True
        deadline.start()
    threading.Thread(target=lambda: (stop.wait(), watch.cancel()), daemon=True).start()
    for t in watch:
        late = (t.started_at_ms - t.scheduled_at_ms) if t.started_at_ms else None
        print(f"{fmt_clock_ms(t.scheduled_at_ms)}  {t.job_id:<22} shard={t.shard:<3} node={t.node_id:<8} "
              f"fence={t.fence:<5} {t.status.value:<9} late={'-' if late is None else late}ms"
              + (f" http={t.http_status}" if t.http_status else ""), flush=True)
