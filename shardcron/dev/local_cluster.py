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
import subprocess
import sys
import tempfile
import threading

from shardcron.cli.args import MAX_PORT, seconds, whole
from shardcron.cli.common import fmt_clock_ms
from shardcron.errors import ShardcronError

# Each stops dev as Ctrl-C does, its cleanup included: SIGHUP comes with a closed terminal,
# whose default action would end dev at once and leave every child running.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A local cluster for a first look: every node is a process on this machine, with ports of its
# own; past these, dev is not what is wanted (a real cluster is).
MAX_NODES = 64
MAX_DEV_SHARDS = 4096
MAX_TTL_S = 3600


DEMO_REDIS = "redis://127.0.0.1:6379/0"
DEMO_STREAM = "shardcron:demo"


def demo_jobs(sink_url: str, *, redis: bool = False) -> list[dict]:
    """What `make dev` submits through the API: a noop every second, an HTTP call, a cron job in Tokyo,
    and, when a Redis answers on 127.0.0.1:6379, one entry per slot added to a Redis stream."""
    jobs = [
        {"id": "heartbeat", "every": "1s", "executor": {"kind": "noop"}, "labels": {"demo": "yes"}},
        {
            "id": "ping-sink",
            "every": "5s",
            "labels": {"demo": "yes"},
            "executor": {"kind": "http", "url": f"{sink_url}/ping", "method": "POST", "body": "hello from shardcron"},
        },
        {
            "id": "tokyo-quarter-minute",
            "cron": "*/15 * * * * *",
            "timezone": "Asia/Tokyo",
            "executor": {"kind": "noop"},
            "labels": {"demo": "yes"},
        },
    ]
    if redis:
        jobs.append(
            {
                "id": "to-redis-stream",
                "every": "5s",
                "labels": {"demo": "yes"},
                "executor": {
                    "kind": "redis-stream",
                    "url": DEMO_REDIS,
                    "stream": DEMO_STREAM,
                    "fields": {"report": "daily"},
                    "maxlen": 1000,
                },
            }
        )
    return jobs


def register(sub) -> None:
    """Add ``dev`` to the ``shardcron`` command."""
    dev = sub.add_parser("dev", help="run a local 3-node cluster with demo jobs (what `make dev` runs)")
    add_flags(dev)
    dev.set_defaults(func=main)


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=whole(1, MAX_NODES), default=3, help="node processes to start (default %(default)s)")
    p.add_argument("--shards", type=whole(1, MAX_DEV_SHARDS), default=16, help="shard count (default %(default)s)")
    p.add_argument("--ttl", type=whole(2, MAX_TTL_S), default=5, help="session TTL in seconds (default %(default)s)")
    p.add_argument(
        "--base-port", type=whole(1, MAX_PORT), default=7071, help="first node's gRPC port (default %(default)s)"
    )
    p.add_argument(
        "--sink-port",
        type=whole(0, MAX_PORT),
        default=8089,
        help="demo HTTP sink port; 0: any free one (default %(default)s)",
    )
    p.add_argument(
        "--http-base-port",
        type=whole(0, MAX_PORT),
        default=8081,
        help="first node's dashboard port; 0: no dashboard (default %(default)s)",
    )
    p.add_argument("--dir", default=None, help="working directory (default: a new temporary one)")
    p.add_argument("--for-seconds", type=seconds(), default=None, help="stop by itself after this long")


def main(a: argparse.Namespace) -> int:
    # Heavy (grpc, etcd, SQLAlchemy): `shardcron --help` imports this module for register(), a dev run these.
    from shardcron.cli import cmd_shards
    from shardcron.client.client import Client  # heavy: see above
    from shardcron.dev.reaper import Reaper  # heavy: see above
    from shardcron.dev.sink import Sink  # heavy: see above
    from shardcron.dev.testing.cluster import Cluster, wait_until  # heavy: see above
    from shardcron.dev.testing.etcd_server import EtcdCluster, port_open  # heavy: see above
    from shardcron.spec.job import job_from_dict  # heavy: see above

    last_port = a.base_port + a.nodes - 1
    if last_port > MAX_PORT or (a.http_base_port and a.http_base_port + a.nodes - 1 > MAX_PORT):
        raise ShardcronError(
            f"--nodes {a.nodes} from --base-port {a.base_port} (or --http-base-port "
            f"{a.http_base_port}) runs past port {MAX_PORT}"
        )
    workdir = a.dir or tempfile.mkdtemp(prefix="shardcron-dev-")
    os.makedirs(workdir, exist_ok=True)
    dashboards = [a.http_base_port + i for i in range(a.nodes)] if a.http_base_port else []
    busy = [p for p in [*range(a.base_port, a.base_port + a.nodes), *dashboards] if port_open("127.0.0.1", p)]
    if busy:
        raise ShardcronError(
            f"port(s) {busy} already in use: is another `shardcron dev` running? "
            "(or pass --base-port / --http-base-port)"
        )
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())

    reaper = Reaper()  # first: whatever happens to dev from here on, the children do not outlive it
    etcd = EtcdCluster(1, base_dir=os.path.join(workdir, "etcd"))
    sink = Sink()
    cluster = None
    try:
        for m in etcd.members:
            reaper.watch(etcd.start_member(m).pid)
        etcd.wait_ready()
        sink.start(port=a.sink_port)
        db_path = os.path.join(workdir, "shardcron.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                os.remove(db_path + suffix)
        db = f"sqlite:///{db_path}"
        cluster = Cluster(etcd.endpoints, db, "/cron", a.shards, a.ttl, workdir)
        for i in range(a.nodes):
            node = cluster.add(
                f"node-{i + 1}",
                port=a.base_port + i,
                extra_args=["--http-listen", f"127.0.0.1:{dashboards[i]}"] if dashboards else [],
            )
            reaper.watch(node.pid)
        print(f"shardcron dev: etcd at {etcd.endpoints}, store {db}, sink {sink.url}, logs in {workdir}")
        members = {f"node-{i + 1}" for i in range(a.nodes)}
        wait_until(
            lambda: stop.is_set() or cluster.wait_balanced(members, 0.5),
            90,
            0.2,
            "the shards to be balanced over the nodes",
        )
        if stop.is_set():
            return 0
        servers = [f"127.0.0.1:{a.base_port + i}" for i in range(a.nodes)]
        client = Client(servers)
        redis = port_open("127.0.0.1", 6379)
        for d in demo_jobs(sink.url.rstrip("/"), redis=redis):
            job = client.put_job(job_from_dict(d))
            print(f"submitted {job.id} (version {job.version}) through {servers[0]}")
        cmd_shards(
            argparse.Namespace(
                etcd=etcd.endpoints,
                prefix="/cron",
                json=False,
                etcd_ca=None,
                etcd_cert=None,
                etcd_key=None,
                etcd_user=None,
                etcd_password_file=None,
            )
        )
        print(
            "\nTry, from another terminal (.venv/bin is on PATH after `. .venv/bin/activate`):\n"
            + "".join(f"  export {name}={value}\n" for name, value in cluster_env(servers[0], etcd.endpoints, db))
            + f"  shardcron jobs put hello --every 10s --http {sink.url.rstrip('/')}/hello\n"
            "  shardcron jobs list\n"
            "  shardcron ticks heartbeat --limit 5\n"
            "  shardcron shards\n"
            "  shardcron nodes\n"
            "  shardcron audit\n"
            + (f"  redis-cli XREVRANGE {DEMO_STREAM} + - COUNT 3   # one entry per slot, never two\n" if redis else "")
            + f"  grpcurl -plaintext {servers[0]} list\n"
            + "".join(f"\nDashboard of node-{i + 1}: http://127.0.0.1:{port}/" for i, port in enumerate(dashboards))
            + ("\n" if dashboards else "")
            + f"\nStreaming ticks (Ctrl-C stops everything; logs and the store stay in {workdir}):",
            flush=True,
        )
        _stream_ticks(client, stop, a.for_seconds)
        client.close()
        return 0
    finally:
        stop_everything(cluster, sink, etcd, reaper)
        # The logs stay where the start-up line said they are: after a surprise
        # they are what a newcomer reads. etcd's data (preallocated WAL files of
        # tens of MB) does not, unless the caller chose the directory.
        if a.dir is None:
            shutil.rmtree(os.path.join(workdir, "etcd"), ignore_errors=True)
        say(f"logs and the store are kept in {workdir} (remove it when done)")


def stop_everything(cluster, sink, etcd, reaper) -> None:
    """Stop the nodes (each resigns its shards), the sink and etcd, then kill whatever is left.

    Every step runs whatever the one before it did: a step that raises is reported and
    the next one still runs, and nothing here prints in a way that can raise (the terminal
    or the ``| tee`` that showed dev's output may be gone by now; that is often why dev stops).
    """
    say("\nstopping the nodes, the sink and etcd ...")
    steps = [("the nodes", cluster.stop_all if cluster else None), ("the sink", sink.stop), ("etcd", etcd.stop)]
    for what, step in steps:
        if step is None:
            continue
        try:
            step()
        except Exception as e:  # noqa: BLE001 - the next step must run; the leftovers are killed below
            say(f"stopping {what} failed ({type(e).__name__}: {e}); killing what is left")
    procs = [m.proc for m in etcd.members] + ([n.proc for n in cluster.nodes.values()] if cluster else [])
    for proc in filter(None, procs):
        if kill_group(proc):
            reaper.forget(proc.pid)  # reaped: its pid may be reused, so the reaper must not signal it
    reaper.close()


def kill_group(proc: subprocess.Popen) -> bool:
    """SIGKILL ``proc``'s process group (it leads one) if it still runs; whether it is reaped."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(10)
        return True
    except subprocess.TimeoutExpired:  # unkillable for now (stuck in the kernel): the reaper tries again
        return False


def say(line: str) -> None:
    """``line`` on stderr, or nowhere when stderr is gone: a print must never cut a cleanup short."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed pipe; a closed file object
        pass


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
        print(
            f"{fmt_clock_ms(t.scheduled_at_ms)}  {t.job_id:<22} shard={t.shard:<3} node={t.node_id:<8} "
            f"fence={t.fence:<5} {t.status.value:<9} late={'-' if late is None else late}ms"
            + (f" http={t.http_status}" if t.http_status else ""),
            flush=True,
        )
