"""The ``at-size`` scenario: 100,000 jobs on 3 nodes and 256 shards.

What it measures, against the targets of the scale-out issue:

- submission: every job through the API (PutJobs, one caller per node, each
  with a third of the jobs), in under 60 s, with no job refused;
- ``shardcron shards`` and ``shardcron jobs list --shard K``: the whole
  command, process start-up included, in under 1 s;
- takeover: a node is drained, and every shard it led (about 400 jobs each)
  is won by another node; from winning to ready to tick (jobs, last ticks and
  orphans loaded, the plan made) in under 1 s, per shard, from the
  ``ready to tick`` log lines;
- memory: each node's peak RSS, under 300 MB;
- the dashboard's job list (``--http-listen``): the first page of every job,
  a search by id, a shard, a label and the paused ones, each a whole HTTP
  request from the server's side of the socket, in under 300 ms;
- hand-over: how long each moved shard had no ready leader, during the drain
  and after it is undone (the shards go back), from etcd's watch
  (``dev/testing/history.py``); hand-overs are paced so that this stays about
  one takeover, not the sum of all of them.

The workload is a mix that a fleet would submit: daily cron schedules in
several time zones spread over the day, plus a small set that ticks every
10 s so that the nodes are working while they are measured.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from shardcron.client.client import Client
from shardcron.dev.bench.harness import BenchEnv, proc_peak_rss_mb
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.dev.testing.history import LeaderHistory
from shardcron.model import Job
from shardcron.spec.job import job_from_dict
from shardcron.store import job_reads
from shardcron.store.engine import make_engine

TARGETS = {"submit_s": 60.0, "command_s": 1.0, "takeover_s": 1.0, "rss_mb": 300.0, "page_ms": 300.0}
ZONES = ("UTC", "Europe/Lisbon", "America/New_York", "Asia/Tokyo", "America/Sao_Paulo")
TICKING = 1000  # the first TICKING jobs tick every 10 s
_READY = re.compile(r"shard (\d+): ready to tick (\d+) ms after winning it \((\d+) jobs\)")


def job_id(i: int) -> str:
    """The id of the workload's ``i``-th job; the first ``TICKING`` of them tick every 10 s."""
    return f"fleet-{i:06d}"


def workload(count: int) -> list[Job]:
    jobs = []
    for i in range(count):
        d: dict = {"id": job_id(i), "executor": {"kind": "noop"}, "labels": {"team": f"t{i % 40}"}}
        if i < TICKING:
            d["every"] = "10s"
        else:
            d["cron"] = f"{i % 60} {(i // 60) % 24} * * *"
            d["timezone"] = ZONES[i % len(ZONES)]
        jobs.append(job_from_dict(d))
    return jobs


def submit(addresses: list[str], jobs: list[Job]) -> dict:
    """One caller per node, each putting its share in PutJobs batches; returns figures and the failures."""
    shares = [jobs[k :: len(addresses)] for k in range(len(addresses))]

    def put(k: int) -> list:
        with Client([addresses[k]], timeout_s=120) as client:
            return [r for r in client.put_jobs(shares[k]) if not r.ok]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(addresses)) as pool:
        failed = [r for rs in pool.map(put, range(len(addresses))) for r in rs]
    took = time.perf_counter() - t0
    return {
        "jobs": len(jobs),
        "seconds": round(took, 2),
        "jobs_per_s": round(len(jobs) / took),
        "failed": len(failed),
        "first_failures": [f"{r.id}: {r.code} {r.message}" for r in failed[:5]],
    }


def time_command(args: list[str], runs: int = 5) -> dict:
    """Wall time of a whole ``shardcron`` command (interpreter start-up included), ``runs`` times."""
    took, out = [], ""
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "shardcron", *args], capture_output=True, text=True, timeout=60)
        took.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise RuntimeError(f"shardcron {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        out = p.stdout
    return {"median_s": round(statistics.median(took), 3), "max_s": round(max(took), 3), "output": out}


def takeovers(log_text: str, since_line: int = 0) -> list[tuple[int, int, int]]:
    """(shard, ms, jobs) of every ``ready to tick`` line in a node log after ``since_line``."""
    return [
        (int(m[1]), int(m[2]), int(m[3])) for line in log_text.splitlines()[since_line:] if (m := _READY.search(line))
    ]


def dashboard_pages(base_url: str, shard: int, runs: int = 5) -> dict:
    """Wall time of the dashboard's job-list pages (the first page of each filter), ``runs`` times each.

    The nodes check no tokens here, so the first request opens a session (a cookie, for CSRF) and
    is not timed; each timed one is a whole request and answer, the page rendered from a ListJobs
    call through the node's API.
    """
    pages = {
        "every job": "/jobs",
        "search by id": "/jobs?q=fleet-0421",
        f"shard {shard}": f"/jobs?shard={shard}",
        "label team=t7": "/jobs?label=team%3Dt7",
        "paused": "/jobs?status=paused",
    }
    out = {}
    with httpx.Client(base_url=base_url, follow_redirects=True, timeout=30) as http:
        http.get("/jobs").raise_for_status()
        for name, path in pages.items():
            took, rows = [], 0
            for _ in range(runs):
                t0 = time.perf_counter()
                r = http.get(path)
                took.append((time.perf_counter() - t0) * 1000)
                r.raise_for_status()
                rows = r.text.count("<tr data-job=")
            out[name] = {
                "path": path,
                "rows": rows,
                "median_ms": round(statistics.median(took), 1),
                "max_ms": round(max(took), 1),
            }
    return out


def run(env: BenchEnv, count: int = 100_000) -> dict:
    http_ports: dict[str, int] = {}
    env.start_nodes(
        count=3, extra_args=lambda node: ["--http-listen", f"127.0.0.1:{http_ports.setdefault(node, free_port())}"]
    )
    cluster = env.cluster
    nodes = sorted(cluster.nodes)
    addresses = [cluster.nodes[n].address for n in nodes]
    figures: dict = {"scenario": "at-size", "nodes": len(nodes), "shards": env.shards, "db": env.db, "targets": TARGETS}
    figures["submit"] = submit(addresses, workload(count))

    leaders = cluster.wait_all_led(60)
    etcd_flags = ["--etcd", env.etcd, "--prefix", cluster.prefix]
    shards_cmd = time_command(["shards", *etcd_flags])
    figures["shards_command"] = {k: v for k, v in shards_cmd.items() if k != "output"}
    busiest = _fullest_shard(env.db)
    list_cmd = ["jobs", "list", "--server", addresses[0], "--shard", str(busiest)]
    listing = time_command(list_cmd)
    listed = json.loads(time_command([*list_cmd, "--json"], runs=1)["output"])
    figures["jobs_list_command"] = {
        "shard": busiest,
        "jobs": len(listed),
        **{k: v for k, v in listing.items() if k != "output"},
    }
    figures["dashboard_jobs"] = dashboard_pages(f"http://127.0.0.1:{http_ports[nodes[0]]}", busiest)

    victim = nodes[0]
    marks = {n: len(cluster.nodes[n].log_text().splitlines()) for n in nodes}
    leaders = cluster.wait_settled(set(nodes), 120)
    moved = sorted(s for s, n in leaders.items() if n == victim)
    history = LeaderHistory(env.etcd, cluster.prefix).start()
    t_drain = time.monotonic()
    drain = subprocess.run(
        [sys.executable, "-m", "shardcron", "drain", victim, *etcd_flags], capture_output=True, text=True, timeout=60
    )
    if drain.returncode != 0:
        history.close()
        raise RuntimeError(f"shardcron drain failed: {drain.stderr.strip()[-500:]}")
    wait_until(
        lambda: all(cluster.leaders().get(s) not in (None, victim) for s in moved),
        120,
        0.2,
        f"the shards of {victim} to move",
    )
    won = {}
    for n in nodes[1:]:
        won.update({s: (ms, jobs) for s, ms, jobs in takeovers(cluster.nodes[n].log_text(), marks[n])})
    times = sorted(ms for s, (ms, _) in won.items() if s in moved)
    loaded = {s: won[s][1] for s in moved if s in won}
    figures["takeover"] = {
        "shards": len(moved),
        "seen": len(times),
        "jobs_loaded": loaded,
        "jobs_per_shard_median": statistics.median(loaded.values() or [0]),
        "median_ms": statistics.median(times) if times else None,
        "max_ms": max(times) if times else None,
    }
    t_undo = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "shardcron", "drain", victim, "--undo", *etcd_flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        # Undone: the victim takes its share back; done when every shard is on its placed node.
        back = cluster.wait_settled(set(nodes), 180)
        t_settled = time.monotonic()
        history.catch_up_now()
        figures["handover"] = {
            "drain": _gaps(history.leaderless(t_drain, t_undo), moved),
            "undo": _gaps(history.leaderless(t_undo, t_settled), [s for s, n in back.items() if n == victim]),
            "undo_s": round(t_settled - t_undo, 1),
        }
    finally:
        history.close()
    figures["peak_rss_mb"] = {n: round(proc_peak_rss_mb(cluster.nodes[n].pid), 1) for n in nodes}
    return figures


def _gaps(leaderless: dict[int, float], shards: list[int]) -> dict:
    """Per moved shard, its longest time without a ready leader: how many, median and max in ms."""
    ms = sorted(round(leaderless.get(s, 0.0) * 1000) for s in shards)
    return {"shards": len(ms), "median_ms": statistics.median(ms) if ms else None, "max_ms": max(ms) if ms else None}


def _fullest_shard(db: str) -> int:
    engine = make_engine(db)
    try:
        counts = job_reads.count_jobs_by_shard(engine)
    finally:
        engine.dispose()
    return max(counts, key=lambda s: (counts[s], -s))


def render(f: dict) -> list[list]:
    t = f["targets"]
    s, sh, jl, to = f["submit"], f["shards_command"], f["jobs_list_command"], f["takeover"]
    rss = max(f["peak_rss_mb"].values())
    return [
        [
            "submit 100,000 jobs (PutJobs, 3 callers)" if s["jobs"] == 100_000 else f"submit {s['jobs']} jobs",
            f"{s['seconds']} s ({s['jobs_per_s']} jobs/s, {s['failed']} refused)",
            f"< {t['submit_s']:.0f} s",
        ],
        ["shardcron shards", f"median {sh['median_s']} s, max {sh['max_s']} s", f"< {t['command_s']:.0f} s"],
        [
            f"shardcron jobs list --shard {jl['shard']} ({jl['jobs']} jobs)",
            f"median {jl['median_s']} s, max {jl['max_s']} s",
            f"< {t['command_s']:.0f} s",
        ],
        *(
            [
                f"dashboard jobs page: {name} ({p['rows']} rows)",
                f"median {p['median_ms']} ms, max {p['max_ms']} ms",
                f"< {t.get('page_ms', 300):.0f} ms",
            ]
            for name, p in f.get("dashboard_jobs", {}).items()
        ),
        [
            f"takeover of {to['shards']} shards (~{to['jobs_per_shard_median']:.0f} jobs each)",
            f"median {to['median_ms']} ms, max {to['max_ms']} ms",
            f"< {t['takeover_s'] * 1000:.0f} ms",
        ],
        [
            "peak RSS per node",
            ", ".join(f"{n} {v} MB" for n, v in f["peak_rss_mb"].items()) + f" (max {rss})",
            f"< {t['rss_mb']:.0f} MB",
        ],
        *(
            [
                [
                    f"leaderless per moved shard: drain ({ho['drain']['shards']} shards), "
                    f"hand-back ({ho['undo']['shards']} shards, done in {ho['undo_s']} s)",
                    f"drain median {ho['drain']['median_ms']} ms, max {ho['drain']['max_ms']} ms; "
                    f"hand-back median {ho['undo']['median_ms']} ms, max {ho['undo']['max_ms']} ms",
                    f"< {t['takeover_s'] * 1000:.0f} ms",
                ]
            ]
            if (ho := f.get("handover"))
            else []
        ),
    ]
