"""``bench scale``: does throughput grow with nodes on one PostgreSQL, and what does a tick cost the database?

For each node count it steps the rate as ``bench throughput`` does (the same
step logic, ``scenarios.step_rates``), and over each step's window reads the
database's own counters, so that the cost per tick is what PostgreSQL saw,
not what a node believes it sent:

* ``pg_stat_statements`` (statements executed), when the extension can be
  used: it needs ``shared_preload_libraries``, which a stock server lacks;
* ``pg_stat_database`` always: commits (``xact_commit``) and rows written
  (``tup_inserted`` + ``tup_updated``).

Both count everything in the bench's database during the window (heartbeats,
balancer reads, the bench's own two snapshot queries), as a real deployment's
would. PostgreSQL flushes a backend's counters at most once a second, so short
windows read a little noisy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.engine import make_url

from shardcron.dev.bench import scenarios
from shardcron.dev.bench.harness import BenchEnv
from shardcron.errors import ConfigError
from shardcron.store.engine import make_engine

P99_LIMIT_MS = 50.0  # issue 13: "total ticks/s sustained at p99 <= 50 ms"

_DATABASE = text("SELECT xact_commit, tup_inserted + tup_updated FROM pg_stat_database "
                 "WHERE datname = current_database()")
_STATEMENTS = text("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                   "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())")


def require_postgresql(db: str | None) -> str:
    if not db or make_url(db).get_backend_name() != "postgresql":
        raise ConfigError("bench scale: --db must name a PostgreSQL database (postgresql+psycopg://...), "
                          f"got {db or 'none (SQLite)'}; the scale figures are PostgreSQL's own counters")
    return db


def statements_source(db: str) -> str:
    """"pg_stat_statements" if it can be read in ``db`` (created here if the server preloads it), else
    "pg_stat_database". A failed attempt rolls back, so a server without it is left as it was."""
    engine = make_engine(db)
    try:
        with engine.begin() as c:
            c.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            c.execute(_STATEMENTS).scalar()
        return "pg_stat_statements"
    except Exception:  # noqa: BLE001 - not installed, not preloaded or not permitted: all mean "fall back"
        return "pg_stat_database"
    finally:
        engine.dispose()


def _counters(db: str, source: str) -> dict[str, int]:
    engine = make_engine(db)
    try:
        with engine.connect() as c:
            commits, rows = c.execute(_DATABASE).one()
            out = {"commits": int(commits), "rows_written": int(rows)}
            if source == "pg_stat_statements":
                out["statements"] = int(c.execute(_STATEMENTS).scalar())
            return out
    finally:
        engine.dispose()


def db_cost_probe(db: str, source: str) -> scenarios.Probe:
    """A window probe: how far the database's counters moved over the window."""
    @contextmanager
    def probe() -> Iterator[dict]:
        before = _counters(db, source)
        moved: dict = {}
        yield moved
        after = _counters(db, source)
        moved["db_counters"] = {k: after[k] - before[k] for k in after}
    return probe


def per_1000_ticks(step: dict) -> dict[str, float | None]:
    """The database's counters over a step, per 1,000 recorded ticks (None where not measured)."""
    moved, ticks = step.get("db_counters", {}), max(1, step["recorded"])
    return {k: round(moved[k] * 1000 / ticks, 1) if k in moved else None
            for k in ("statements", "commits", "rows_written")}


def run(make_env: Callable[[int], BenchEnv], node_counts: list[int], rates: list[int], seconds: int,
        db: str) -> dict:
    source = statements_source(db)
    probe = db_cost_probe(db, source)
    counts = []
    for n in node_counts:
        steps, held = scenarios.step_rates(lambda n=n: make_env(n), rates, seconds, P99_LIMIT_MS,
                                           prefix=f"sc{n}x", probe=probe)
        for s in steps:
            s["db_per_1000_ticks"] = per_1000_ticks(s)
        counts.append({"nodes": n, "highest_sustained_rate": held, "steps": steps})
    return {"scenario": "scale", "db": "postgresql", "seconds": seconds, "p99_limit_ms": P99_LIMIT_MS,
            "db_cost_source": source, "node_counts": counts}


HEADERS = ["nodes", "ticks/s", "recorded", "missed", "duplicated", "p50 ms", "p99 ms", "max ms",
           "CPU ms/1k ticks (all nodes)", "statements/1k", "commits/1k", "rows written/1k"]


def render(f: dict) -> list[list]:
    rows = []
    for c in f["node_counts"]:
        for s in c["steps"]:
            lat, db = s["lateness_ms"], s["db_per_1000_ticks"]
            rows.append([c["nodes"], s["rate"], s["recorded"], s["missed"], s["duplicated"], lat["p50"],
                         lat["p99"], lat["max"], s["cpu_ms_per_1000_ticks"],
                         "-" if db["statements"] is None else db["statements"], db["commits"], db["rows_written"]])
    return rows


def summary(f: dict) -> list[str]:
    held = ", ".join(f"{c['nodes']} node{'s' if c['nodes'] > 1 else ''}: {c['highest_sustained_rate']}"
                     for c in f["node_counts"])
    source = ("pg_stat_statements (statements) and pg_stat_database (commits, rows)"
              if f["db_cost_source"] == "pg_stat_statements" else
              "pg_stat_database (commits, rows); statements not counted: pg_stat_statements is not in "
              "shared_preload_libraries")
    return [f"highest total rate sustained (p99 <= {f['p99_limit_ms']} ms, nothing missed), ticks/s: {held}",
            f"database cost read from {source}"]
