"""``shardcron bench``: precision, throughput, scale, failover, submission, dispatch and fairness figures, on this machine.

It starts what it needs (an etcd unless ``--etcd``, a SQLite store in a
temporary directory unless ``--db``, ``--nodes`` node processes), runs one
scenario and prints a table; ``--json FILE`` writes the same figures.
"""

from __future__ import annotations

import argparse
import json

from tabulate import tabulate

from shardcron.errors import ConfigError, ShardcronError


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="measure tick precision, throughput, scale, failover, submission and dispatch speed"
    )
    p.add_argument(
        "scenario",
        choices=["precision", "throughput", "scale", "failover", "submit", "at-size", "dispatch", "fairness", "rest"],
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="jobs firing every second (default 1000); at-size: jobs held (default 100000); "
        "fairness: the calm namespace's noop jobs (default 100); rest: jobs every 10 s (default 100)",
    )
    p.add_argument(
        "--flood-jobs",
        type=int,
        default=2000,
        help="fairness: the flooding namespace's http jobs, each every second (default %(default)s)",
    )
    p.add_argument(
        "--executor-slots", type=int, default=100, help="fairness: the node's --executor-slots (default %(default)s)"
    )
    p.add_argument("--seconds", type=int, default=60, help="measured window (default %(default)s)")
    p.add_argument(
        "--nodes",
        default=None,
        help="node processes (default 1; 3 for failover); scale: node counts to compare (default 1,2,3)",
    )
    p.add_argument("--shards", type=int, default=None, help="shard count (default 64; at-size 256)")
    p.add_argument("--ttl", type=int, default=10, help="session TTL (default %(default)s)")
    p.add_argument(
        "--db", default=None, help="store URL (default: SQLite in a temporary directory); scale needs a PostgreSQL one"
    )
    p.add_argument("--etcd", default=None, help="use this etcd instead of starting one")
    p.add_argument(
        "--rates",
        default=None,
        help="throughput and scale: total ticks/s steps (default 1000,2000,5000,10000); "
        "dispatch: default 500,1000,2000",
    )
    p.add_argument(
        "--neighbour",
        choices=["none", "cpu"],
        default="none",
        help="precision: 'cpu' measures a second window beside a busy neighbour (one python spin loop "
        "per CPU the nodes may use, pinned to it, normal priority, started just before that "
        "window and killed after it) and prints quiet and loaded side by side "
        "(default %(default)s)",
    )
    p.add_argument(
        "--kind",
        default="redis-stream",
        choices=["nats", "celery", "redis-stream", "amqp", "rq", "arq", "http"],
        help="dispatch: the executor kind to measure (default %(default)s)",
    )
    p.add_argument(
        "--broker",
        default=None,
        help="dispatch: the broker's URL (default: the local Redis, RabbitMQ or NATS for the kind)",
    )
    p.add_argument(
        "--spread",
        action="store_true",
        help="dispatch: give every job 900 ms of jitter, so its slots come due spread over each second, and "
        "judge the p99 (<= 50 ms) too (default: every slot on the same second, the p99 a burst's length)",
    )
    p.add_argument("--trials", type=int, default=10, help="failover: kill -9 trials (default %(default)s)")
    p.add_argument("--graceful-trials", type=int, default=3, help="failover: SIGTERM trials")
    p.add_argument("--peer", choices=["apscheduler"], default=None, help="run the same workload on a peer")
    p.add_argument("--peer-store", choices=["memory", "sqlite"], default="memory")
    p.add_argument("--json", dest="json_file", default=None, metavar="FILE", help="write the figures as JSON")
    p.set_defaults(func=main)


def main(a: argparse.Namespace) -> int:
    # The scenarios are heavy (grpc, etcd, SQLAlchemy): `shardcron --help` imports this module for register(),
    # so each is imported by the run that needs it.
    from shardcron.dev.testing.cluster import GaveUp

    try:
        return _run(a)
    except (TimeoutError, GaveUp, RuntimeError) as e:
        # A cluster that would not come up or a node that died: say which, without a traceback.
        raise ShardcronError(f"bench {a.scenario}: {e}") from None


def _run(a: argparse.Namespace) -> int:
    from shardcron.dev.bench import scenarios  # loaded by the run that needs it
    from shardcron.dev.bench.harness import BenchEnv  # loaded by the run that needs it
    from shardcron.dev.testing.etcd_server import EtcdCluster  # loaded by the run that needs it

    if a.jobs is None:
        a.jobs = {"at-size": 100_000, "fairness": 100, "rest": 100}.get(a.scenario, 1000)
    if a.jobs <= 0 or a.seconds <= 0:
        raise ConfigError("--jobs and --seconds must be positive")
    if a.flood_jobs <= 0 or a.executor_slots <= 0:
        raise ConfigError("--flood-jobs and --executor-slots must be positive")
    if a.neighbour != "none" and a.scenario != "precision":
        raise ConfigError(f"--neighbour is for bench precision, not {a.scenario}")
    if a.spread and a.scenario != "dispatch":
        raise ConfigError(f"--spread is for bench dispatch, not {a.scenario}")
    node_counts = _counts("--nodes", a.nodes or ("1,2,3" if a.scenario == "scale" else ""))
    if a.scenario != "scale" and len(node_counts) > 1:
        raise ConfigError(f"--nodes: one count for bench {a.scenario}; a list such as 1,2,3 is for bench scale")
    nodes = node_counts[0] if node_counts else (3 if a.scenario in ("failover", "at-size") else 1)

    a.shards = a.shards or (256 if a.scenario == "at-size" else 64)

    def env(n: int = nodes, ttl: int = a.ttl) -> BenchEnv:
        return BenchEnv(nodes=n, shards=a.shards, ttl=ttl, db=a.db, etcd=a.etcd)

    figures: dict
    if a.scenario == "precision":
        with env() as e:
            if a.neighbour == "cpu":
                figures = scenarios.precision_beside_neighbour(e, a.jobs, a.seconds)
            else:
                figures = scenarios.precision(e, a.jobs, a.seconds)
    elif a.scenario in ("throughput", "dispatch", "scale"):
        if a.scenario == "scale":
            from shardcron.dev.bench import scale  # loaded by the run that needs it

            scale.require_postgresql(a.db)
        rates = _rates(a.rates or ("500,1000,2000" if a.scenario == "dispatch" else "1000,2000,5000,10000"))
        # One etcd for every step: a store remembers the etcd cluster its fences came from.
        shared = None if a.etcd else EtcdCluster(1).start()

        def make_env(n: int = nodes) -> BenchEnv:
            return BenchEnv(
                nodes=n, shards=a.shards, ttl=a.ttl, db=a.db, etcd=a.etcd if shared is None else shared.endpoints
            )

        try:
            if a.scenario == "throughput":
                figures = scenarios.throughput(make_env, rates, a.seconds)
            elif a.scenario == "scale":
                figures = scale.run(make_env, node_counts, rates, a.seconds, a.db)
            else:
                from shardcron.dev.bench import dispatch  # loaded by the run that needs it

                figures = dispatch.run(make_env, a.kind, rates, a.seconds, a.broker, a.spread)
        finally:
            if shared:
                shared.stop()
    elif a.scenario == "fairness":
        from shardcron.dev.bench import fairness  # loaded by the run that needs it

        shared = None if a.etcd else EtcdCluster(1).start()
        try:
            figures = fairness.run(
                lambda extra: BenchEnv(
                    nodes=1,
                    shards=a.shards,
                    ttl=a.ttl,
                    db=a.db,
                    etcd=a.etcd if shared is None else shared.endpoints,
                    extra_args=extra,
                ),
                a.jobs,
                a.flood_jobs,
                a.seconds,
                a.executor_slots,
            )
        finally:
            if shared:
                shared.stop()
    elif a.scenario == "failover":
        with env() as e:
            figures = scenarios.failover(e, a.jobs, a.trials, a.graceful_trials)
    elif a.scenario == "rest":
        from shardcron.dev.bench import at_rest  # loaded by the run that needs it

        with env() as e:
            figures = at_rest.run(e, a.jobs, a.seconds)
    elif a.scenario == "at-size":
        from shardcron.dev.bench import at_size  # loaded by the run that needs it

        with env() as e:
            figures = at_size.run(e, a.jobs)
    else:
        from shardcron.dev.bench import submit  # loaded by the run that needs it

        with env(n=max(2, nodes)) as e:
            figures = submit.run(e, a.jobs, a.seconds)
    out = {"shardcron": figures}
    if a.peer and a.scenario in ("precision", "throughput"):
        from shardcron.dev.bench import peer_apscheduler  # loaded by the run that needs it

        jobs = a.jobs if a.scenario == "precision" else figures["highest_sustained_rate"] or a.jobs
        peer = peer_apscheduler.run(jobs, a.seconds, a.peer_store)
        out["peer"] = peer
    print(render(out))
    if a.json_file:
        with open(a.json_file, "w") as f:
            json.dump(out, f, indent=2)
    return 0


def _rates(text: str) -> list[int]:
    rates = _counts("--rates", text)
    if not rates:
        raise ConfigError(f"--rates: expected positive numbers such as 1000,2000, got {text!r}")
    return rates


def _counts(flag: str, text: str) -> list[int]:
    """A comma list of positive numbers ("1,2,3"); empty text gives an empty list."""
    try:
        counts = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise ConfigError(f"{flag}: expected numbers such as 1,2,3, got {text!r}") from None
    if counts and min(counts) <= 0:
        raise ConfigError(f"{flag}: expected positive numbers such as 1,2,3, got {text!r}")
    return counts


def _lat(m: dict) -> list:
    lat = m.get("lateness_ms", {})
    return [lat.get("p50"), lat.get("p99"), lat.get("p99.9"), lat.get("max")]


def render(out: dict) -> str:
    from shardcron.dev.bench.node_shape import COLUMNS, columns, describe  # loaded by the run that needs it

    f = out["shardcron"]
    lines = []
    if f["scenario"] == "precision":
        # Beside a neighbour, one row per window: "quiet" and "loaded" on the same nodes.
        runs = [("shardcron", f)] if "loaded" not in f else [("quiet", f), ("loaded", f["loaded"])]
        rows = [
            [
                name,
                m["db"],
                m["jobs"],
                m["expected"],
                m["recorded"],
                m["missed"],
                m["duplicated"],
                *_lat(m),
                m["cpu_ms_per_1000_ticks"],
                m["peak_rss_mb"],
            ]
            for name, m in runs
        ]
        if "peer" in out:
            p = out["peer"]
            rows.append([p["peer"], "-", p["jobs"], p["expected"], p["recorded"], p["missed"], "-", *_lat(p), "-", "-"])
        lines.append(
            tabulate(
                rows,
                headers=[
                    "scheduler" if "loaded" not in f else "run",
                    "store",
                    "jobs/s",
                    "expected",
                    "recorded",
                    "missed",
                    "duplicated",
                    "p50 ms",
                    "p99 ms",
                    "p99.9 ms",
                    "max ms",
                    "CPU ms/1k ticks",
                    "peak RSS MB",
                ],
                tablefmt="github",
            )
        )
        lines.append("")
        lines += [
            f"{name}: {describe(m.get('node'))}" if len(runs) > 1 else describe(m.get("node")) for name, m in runs
        ]
        if "loaded" in f:
            lines.append(
                f"\nneighbour: {len(f['neighbour_pids'])} busy process(es), one per CPU the node may use; "
                f"target (issue 13): p99 <= {f['loaded_p99_target_ms']} ms loaded, nothing missed: "
                f"{'met' if f['loaded_target_met'] else 'NOT met'} on {f['db']}"
            )
        if "peer" in out and f["lateness_ms"]["p99"] and out["peer"]["lateness_ms"]["p99"]:
            ratio = out["peer"]["lateness_ms"]["p99"] / max(f["lateness_ms"]["p99"], 0.5)
            lines.append(f"\np99 lateness: APScheduler / shardcron = {ratio:.1f}x")
    elif f["scenario"] == "throughput":
        rows = [
            [
                s["rate"],
                s["expected"],
                s["recorded"],
                s["missed"],
                s["duplicated"],
                *_lat(s),
                s["cpu_ms_per_1000_ticks"],
                *columns(s.get("node")),
            ]
            for s in f["steps"]
        ]
        lines.append(
            tabulate(
                rows,
                headers=[
                    "ticks/s",
                    "expected",
                    "recorded",
                    "missed",
                    "duplicated",
                    "p50 ms",
                    "p99 ms",
                    "p99.9 ms",
                    "max ms",
                    "CPU ms/1k ticks",
                    *COLUMNS,
                ],
                tablefmt="github",
            )
        )
        lines.append(
            f"\nhighest rate sustained (p99 <= {f['p99_limit_ms']} ms, nothing missed): "
            f"{f['highest_sustained_rate']} ticks/s on {f['db']}"
        )
        if "peer" in out:
            p = out["peer"]
            lines.append(
                f"APScheduler at {p['jobs']}/s: missed {p['missed']} of {p['expected']}, "
                f"p99 {p['lateness_ms']['p99']} ms"
            )
    elif f["scenario"] == "scale":
        from shardcron.dev.bench import scale  # loaded by the run that needs it

        lines.append(tabulate(scale.render(f), headers=scale.HEADERS, tablefmt="github"))
        lines += ["", *scale.summary(f)]
    elif f["scenario"] == "failover":
        rows = [
            [
                t["trial"],
                t["kind"],
                t["shard"],
                t["victim"],
                t["seconds_to_new_leader"],
                t["seconds_to_first_claim"],
                t["slots_caught_up"],
                t["max_lateness_s"],
                t["slots_not_run"],
            ]
            for t in f["trials"]
        ]
        lines.append(
            tabulate(
                rows,
                headers=[
                    "trial",
                    "stop",
                    "shard",
                    "stopped leader",
                    "s to new leader",
                    "s to first claim",
                    "slots caught up",
                    "max lateness s",
                    "slots not run",
                ],
                tablefmt="github",
            )
        )
        lines.append(
            f"\nTTL {f['ttl']} s: kill -9 worst {f['kill9_max_s']} s to the successor's first claim; "
            f"SIGTERM worst {f['sigterm_max_s']} s to the new leader"
        )
    elif f["scenario"] == "dispatch":
        from shardcron.dev.bench import dispatch  # loaded by the run that needs it

        lines.append(dispatch.heading(f))
        lines.append(tabulate(dispatch.render(f), headers=dispatch.HEADERS, tablefmt="github"))
        lines.append("\n" + dispatch.verdict(f))
        errors = [f"{s['rate']}/s: {s['first_error']}" for s in f["steps"] if s.get("first_error")]
        if errors:
            lines.append("first failure: " + "; ".join(errors))
        lines += [f"{s['rate']}/s not measured: {s['error']}" for s in f["steps"] if "error" in s]
    elif f["scenario"] == "fairness":
        from shardcron.dev.bench import fairness  # loaded by the run that needs it

        lines.append(tabulate(fairness.render(f), headers=fairness.HEADERS, tablefmt="github"))
        lines.append("\n" + fairness.verdict(f))
    elif f["scenario"] == "rest":
        from shardcron.dev.bench import at_rest  # loaded by the run that needs it

        lines += at_rest.render(f)
    elif f["scenario"] == "at-size":
        from shardcron.dev.bench import at_size  # loaded by the run that needs it

        lines.append(tabulate(at_size.render(f), headers=["at size", "measured", "target"], tablefmt="github"))
    else:
        from shardcron.dev.bench import submit  # loaded by the run that needs it

        lines.append(tabulate(submit.render(f), headers=submit.HEADERS, tablefmt="github"))
        lines += submit.health_lines(f)
    return "\n".join(lines)
