"""What every benchmark scenario needs: an etcd, a store, node processes, and the tick rows they write."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import func, select

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import EtcdCluster, free_port
from shardcron.store.engine import make_engine, reading
from shardcron.store.schema import fence_log, job_labels, ticks
from shardcron.store.schema import jobs as jobs_table

T = TypeVar("T")
WARMUP_S = 3.0  # the warm-up before a scenario's measured window opens


def _entered(value: T | None) -> T:
    """What ``BenchEnv.__enter__`` sets up, read inside the ``with``."""
    if value is None:
        raise RuntimeError("BenchEnv: use it as a context manager (with BenchEnv(...) as env)")
    return value


def window_start(after_s: float) -> int:
    """The next whole second at least ``after_s`` from now, in ms."""
    return (int(time.time() + after_s) + 1) * 1000


def db_kind(url: str | None) -> str:
    """The store's kind, as the figures name it: ``sqlite``, ``postgresql``, ``mysql``."""
    return (url or "sqlite").split(":", 1)[0].split("+", 1)[0]


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[k]


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_cpu_seconds() -> float:
    """CPU time every core of this machine spent busy (not idle nor waiting for I/O), from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


@dataclass
class CpuWindow:
    """CPU spent over a window by named processes, this process ("caller") and the rest of the machine."""

    pids: dict[str, int]
    before: dict[str, float]

    @classmethod
    def start(cls, pids: dict[str, int]) -> CpuWindow:
        return cls(dict(pids), cls._now(pids))

    @staticmethod
    def _now(pids: dict[str, int]) -> dict[str, float]:
        now = {name: proc_cpu_seconds(pid) for name, pid in pids.items()}
        now["caller"] = time.process_time()
        now["machine"] = machine_busy_cpu_seconds()
        return now

    def per_call_ms(self, calls: int) -> dict[str, float]:
        """ms of CPU per call: each named process, "caller", and "rest" (the machine less all those)."""
        after = self._now(self.pids)
        spent = {k: after[k] - self.before[k] for k in after}
        spent["rest"] = max(0.0, spent.pop("machine") - sum(spent.values()))
        return {k: round(v * 1000 / max(calls, 1), 3) for k, v in spent.items()}


def proc_peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class BenchEnv:
    """An etcd (ours or the user's), a store and N node processes; ``db``, ``etcd`` and ``cluster`` once entered.

    ``db`` and ``etcd`` None: a SQLite file and an etcd of its own. ``serve_metrics``: each node serves
    /metrics on a free port of its own (``metrics_ports``), where the benches read its keep-alive's lateness.
    """

    def __init__(
        self,
        nodes: int = 1,
        shards: int = 64,
        ttl: int = 10,
        db: str | None = None,
        etcd: str | None = None,
        extra_args: list[str] | None = None,
        serve_metrics: bool = True,
        workdir: str | None = None,
    ):
        self.nodes, self.shards, self.ttl = nodes, shards, ttl
        self._db, self._endpoints = db, etcd
        self.extra_args = extra_args if extra_args is not None else []
        self.serve_metrics = serve_metrics
        self.workdir = workdir if workdir is not None else tempfile.mkdtemp(prefix="shardcron-bench-")
        self._etcd: EtcdCluster | None = None
        self._cluster: Cluster | None = None
        self.metrics_ports: dict[str, int] = {}

    @property
    def db(self) -> str:
        return _entered(self._db)

    @property
    def etcd(self) -> str:
        return _entered(self._endpoints)

    @property
    def cluster(self) -> Cluster:
        return _entered(self._cluster)

    def __enter__(self) -> BenchEnv:
        os.makedirs(self.workdir, exist_ok=True)
        if self._endpoints is None:
            self._etcd = EtcdCluster(1, base_dir=os.path.join(self.workdir, "etcd")).start()
            self._endpoints = self._etcd.endpoints
        if self._db is None:
            self._db = f"sqlite:///{self.workdir}/bench.db"
        prefix = f"/bench{int(time.time() * 1000)}"
        self._cluster = Cluster(
            self._endpoints, self._db, prefix, self.shards, self.ttl, self.workdir, extra_args=list(self.extra_args)
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cluster:
            self._cluster.stop_all()
        if self._etcd:
            self._etcd.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def write_noop_jobs(self, count: int, every: str = "1s", prefix: str = "bench") -> str:
        path = os.path.join(self.workdir, f"jobs-{prefix}-{count}.json")
        with open(path, "w") as f:
            json.dump(
                {
                    "jobs": [
                        {"id": f"{prefix}-{i:06d}", "every": every, "executor": {"kind": "noop"}} for i in range(count)
                    ]
                },
                f,
            )
        return path

    def start_nodes(
        self,
        jobs_file: str | None = None,
        count: int | None = None,
        extra_args: Callable[[str], list[str]] | None = None,
    ) -> list[str]:
        """``extra_args(node_id)``: flags of that node's own (a port, say)."""
        ids = []
        for _ in range(count or self.nodes):
            node_id = f"bench-{len(self.cluster.nodes)}"
            metrics_args = []
            if self.serve_metrics:
                self.metrics_ports[node_id] = free_port()
                metrics_args = ["--metrics-listen", f"127.0.0.1:{self.metrics_ports[node_id]}"]
            self.cluster.add(
                node_id,
                extra_args=[
                    *(["--jobs", jobs_file] if jobs_file else []),
                    *metrics_args,
                    *(extra_args(node_id) if extra_args else []),
                ],
            )
            ids.append(node_id)
        members = set(self.cluster.nodes)
        self.cluster.wait_balanced(members, timeout_s=120 + 2 * self.ttl)
        return ids

    def wait_jobs_loaded(self, count: int, timeout_s: float = 180) -> None:
        def loaded():
            with read_store(self.db) as c:
                return c.execute(select(func.count()).select_from(jobs_table)).scalar() >= count

        wait_until(loaded, timeout_s, 0.25, f"{count} jobs to be imported")

    def forget_jobs(self, prefix: str, *, with_ticks: bool = False) -> None:
        """Delete the jobs this benchmark wrote under ``prefix`` (nodes stopped), so that the next step on
        the same store does not run them too; ``with_ticks`` (figures read) their ticks too, so that it does
        not inherit their orphans either: a step that overloaded its nodes leaves a million claimed rows, and
        the next step's leaders would spend their start-up abandoning them."""
        engine = make_engine(self.db)
        try:
            with engine.begin() as c:
                c.execute(job_labels.delete().where(job_labels.c.job_id.like(f"{prefix}-%")))
                c.execute(jobs_table.delete().where(jobs_table.c.id.like(f"{prefix}-%")))
                if with_ticks:
                    c.execute(ticks.delete().where(ticks.c.job_id.like(f"{prefix}-%")))
        finally:
            engine.dispose()

    def tick_rows(self, from_ms: int, to_ms: int) -> list:
        with read_store(self.db) as c:
            return c.execute(
                select(
                    ticks.c.job_id,
                    ticks.c.scheduled_at_ms,
                    ticks.c.started_at_ms,
                    ticks.c.claimed_at_ms,
                    ticks.c.status,
                    ticks.c.node_id,
                    ticks.c.fence,
                    ticks.c.shard,
                    ticks.c.manual,
                ).where(ticks.c.scheduled_at_ms >= from_ms, ticks.c.scheduled_at_ms < to_ms)
            ).all()

    def fence_raises(self, shard: int, since_ms: int) -> list:
        """(fence, node_id, raised_at_ms) of the shard's fence raises at or after ``since_ms``, oldest first."""
        with read_store(self.db) as c:
            return c.execute(
                select(fence_log.c.fence, fence_log.c.node_id, fence_log.c.raised_at_ms)
                .where(fence_log.c.shard == shard, fence_log.c.raised_at_ms >= since_ms)
                .order_by(fence_log.c.raised_at_ms)
            ).all()

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.cluster.nodes.items() if p.alive()}


@contextmanager
def read_store(db: str) -> Iterator:
    """A read-only connection to ``db`` (it takes no write lock: on SQLite a BEGIN IMMEDIATE here would
    queue behind the nodes' writers and fail with "database is locked" under load)."""
    engine = make_engine(db)
    try:
        with reading(engine) as c:
            yield c
    finally:
        engine.dispose()
