"""``bench scale``: does throughput grow with nodes on one PostgreSQL, and what does a tick cost the database?

For each node count it steps the rate as ``bench throughput`` does (the same
step logic, ``scenarios.step_rates``), and over each step's window reads what
the database was asked to do, per 1,000 recorded ticks:

* statements, counted by the nodes themselves: each node serves its metrics
  here, and ``shardcron_db_call_seconds_count`` counts every statement its
  engine sent, by first keyword (an executemany counts once; BEGIN and
  COMMIT are not statements there). ``pg_stat_statements`` would say the same
  from the server's side, but it needs ``shared_preload_libraries`` and a
  restart, which a stock server lacks;
* commits (``xact_commit``) and rows written (``tup_inserted`` +
  ``tup_updated``) from ``pg_stat_database``, the server's own counters, and
  the WAL written (``pg_current_wal_lsn``; the whole server's). They
  count everything in the bench's database during the window (heartbeats,
  balancer reads, the bench's own two snapshot queries), as a real
  deployment's would. PostgreSQL flushes a backend's counters at most once a
  second, so short windows read a little noisy;
* the server's CPU, when it runs on this machine (a host of 127.0.0.1,
  localhost or a socket): the user and system time, from /proc over the
  window, of the server processes serving the bench's database
  (``pg_stat_activity``: the nodes' backends, autovacuum's workers there);
  a backend that exits inside the window is lost, a new one counts from
  zero, and the shared WAL writer and checkpointer are not counted. That is
  what a primary spends per tick, the figure that says how many nodes one
  can carry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.engine import make_url

from shardcron.dev.bench import scenarios
from shardcron.dev.bench.harness import BenchEnv, proc_cpu_seconds
from shardcron.errors import ConfigError
from shardcron.store.engine import make_engine

P99_LIMIT_MS = 50.0  # issue 13: "total ticks/s sustained at p99 <= 50 ms"

_DATABASE = text(
    "SELECT xact_commit, tup_inserted + tup_updated, "
    "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') FROM pg_stat_database "
    "WHERE datname = current_database()"
)
_BACKENDS = text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
_STATEMENT_COUNT = "shardcron_db_call_seconds"  # a histogram; its _count sample counts statements


def require_postgresql(db: str | None) -> str:
    if not db or make_url(db).get_backend_name() != "postgresql":
        raise ConfigError(
            "bench scale: --db must name a PostgreSQL database (postgresql+psycopg://...), "
            f"got {db or 'none (SQLite)'}; the scale figures are PostgreSQL's own counters"
        )
    return db


def _database_counters(db: str) -> dict[str, int]:
    engine = make_engine(db)
    try:
        with engine.connect() as c:
            commits, rows, wal = c.execute(_DATABASE).one()
            return {"commits": int(commits), "rows_written": int(rows), "wal_bytes": int(wal)}
    finally:
        engine.dispose()


def _statements_sent(env: BenchEnv) -> int:
    """Statements every node of ``env`` has sent since it started, from its own /metrics."""
    total = 0.0
    for port in env.metrics_ports.values():
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        total += sum(
            sample.value
            for family in text_string_to_metric_families(page)
            if family.name == _STATEMENT_COUNT
            for sample in family.samples
            if sample.name == f"{_STATEMENT_COUNT}_count"
        )
    return int(total)


def _server_is_local(db: str) -> bool:
    return make_url(db).host in (None, "", "127.0.0.1", "localhost", "::1")


def _backend_cpu_seconds(db: str) -> dict[int, float]:
    """pid -> CPU seconds of every server process serving ``db`` now (its backends and autovacuum workers):
    other databases' work on the same server, a test suite's say, is not counted."""
    engine = make_engine(db)
    try:
        with engine.connect() as c:
            pids = c.execute(_BACKENDS).scalars().all()
    finally:
        engine.dispose()
    out = {}
    for pid in pids:
        try:
            out[pid] = proc_cpu_seconds(pid)
        except OSError:  # it exited while we looked
            continue
    return out


def db_cost_probe(db: str) -> scenarios.Probe:
    """A window probe: how far the nodes' statement counts, the database's counters and (on this machine)
    the server's CPU moved over the window."""
    local = _server_is_local(db)

    @contextmanager
    def probe(env: BenchEnv) -> Iterator[dict]:
        before = {**_database_counters(db), "statements": _statements_sent(env)}
        cpu_before = _backend_cpu_seconds(db) if local else {}
        moved: dict = {}
        yield moved
        cpu_after = _backend_cpu_seconds(db) if local else {}
        after = {**_database_counters(db), "statements": _statements_sent(env)}
        moved["db_counters"] = {k: after[k] - before[k] for k in after}
        if local:
            moved["db_counters"]["server_cpu_ms"] = 1000 * sum(
                t - cpu_before.get(pid, 0.0) for pid, t in cpu_after.items()
            )

    return probe


def per_1000_ticks(step: dict) -> dict[str, float | None]:
    """The database's counters over a step, per 1,000 recorded ticks (None where not measured)."""
    moved, ticks = step.get("db_counters", {}), max(1, step["recorded"])
    return {
        k: round(moved[k] * 1000 / ticks, 1) if k in moved else None
        for k in ("statements", "commits", "rows_written", "wal_bytes", "server_cpu_ms")
    }


def _serving_metrics(env: BenchEnv) -> BenchEnv:
    env.serve_metrics = True  # the statement counts are read from the nodes' own metrics
    return env


def run(make_env: Callable[[int], BenchEnv], node_counts: list[int], rates: list[int], seconds: int, db: str) -> dict:
    probe = db_cost_probe(db)
    counts = []
    for n in node_counts:
        steps, held = scenarios.step_rates(
            lambda n=n: _serving_metrics(make_env(n)), rates, seconds, P99_LIMIT_MS, prefix=f"sc{n}x", probe=probe
        )
        for s in steps:
            s["db_per_1000_ticks"] = per_1000_ticks(s)
        counts.append({"nodes": n, "highest_sustained_rate": held, "steps": steps})
    return {
        "scenario": "scale",
        "db": "postgresql",
        "seconds": seconds,
        "p99_limit_ms": P99_LIMIT_MS,
        "node_counts": counts,
    }


HEADERS = [
    "nodes",
    "ticks/s",
    "recorded",
    "missed",
    "duplicated",
    "p50 ms",
    "p99 ms",
    "max ms",
    "CPU ms/1k ticks (all nodes)",
    "PostgreSQL CPU ms/1k",
    "statements/1k",
    "commits/1k",
    "rows written/1k",
    "WAL KB/1k",
]


def render(f: dict) -> list[list]:
    rows = []
    for c in f["node_counts"]:
        for s in c["steps"]:
            lat, db = s["lateness_ms"], s["db_per_1000_ticks"]
            rows.append(
                [
                    c["nodes"],
                    s["rate"],
                    s["recorded"],
                    s["missed"],
                    s["duplicated"],
                    lat["p50"],
                    lat["p99"],
                    lat["max"],
                    s["cpu_ms_per_1000_ticks"],
                    "-" if db["server_cpu_ms"] is None else db["server_cpu_ms"],
                    db["statements"],
                    db["commits"],
                    db["rows_written"],
                    round(db["wal_bytes"] / 1024, 1),
                ]
            )
    return rows


def summary(f: dict) -> list[str]:
    held = ", ".join(
        f"{c['nodes']} node{'s' if c['nodes'] > 1 else ''}: {c['highest_sustained_rate']}" for c in f["node_counts"]
    )
    return [
        f"highest total rate sustained (p99 <= {f['p99_limit_ms']} ms, nothing missed), ticks/s: {held}",
        "statements: sent by the nodes (their shardcron_db_call_seconds_count); commits and rows written: "
        "PostgreSQL's pg_stat_database; WAL: pg_current_wal_lsn; PostgreSQL CPU: its processes on this machine "
        "(- when it runs elsewhere)",
    ]
