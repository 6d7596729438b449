"""``shardcron bench rest``: a node's threads and event loops at rest, by name.

One node with the API and the dashboard on and ``--jobs`` noop jobs (default
100), each every ``EVERY``, after a user's first visit: the dashboard's pages
and a ListJobs call through the API. Its threads are read from the kernel by
name (``/proc/<pid>/task/*/comm``, named by ``runtime/thread_names``) every
``SAMPLE_EVERY_S`` over the window; the figure is the count at peak, with the
names at that moment, gRPC's and every library's own threads included.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter

import httpx
from tabulate import tabulate

from shardcron.client.client import Client
from shardcron.dev.bench.harness import BenchEnv, db_kind
from shardcron.dev.bench.node_shape import SAMPLE_EVERY_S, describe, node_shape
from shardcron.dev.testing.etcd_server import free_port

EVERY = "10s"
TARGET_THREADS = 16  # issue 32: a node at rest, API and dashboard on, 100 jobs
DASHBOARD_PAGES = ["/", "/jobs", "/cluster"]


def thread_names(pid: int) -> list[str]:
    """The OS names of process ``pid``'s threads now (empty once it has exited)."""
    names = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended between the listing and the read
            continue
    return names


def grouped(names: list[str]) -> dict[str, int]:
    """Thread names with the numbering of a pool or of ``threading``'s default names folded ("tick_3", "tick_12"
    -> "tick_*"; "Thread-3 (_run)" -> "Thread-N (_run)"), most first."""
    folded = Counter(re.sub(r"[_-]\d+$", "_*", re.sub(r"^Thread-\d+", "Thread-N", n)) for n in names)
    return dict(sorted(folded.items(), key=lambda kv: (-kv[1], kv[0])))


def visit(api: str, dashboard: str) -> None:
    """What a new user's first minutes do: the dashboard's pages, and a ListJobs call through the API."""
    with httpx.Client(base_url=dashboard, follow_redirects=True, timeout=30) as web:
        for page in DASHBOARD_PAGES:
            web.get(page)
    client = Client(api, timeout_s=30)
    try:
        client.list_jobs()
    finally:
        client.close()


def run(env: BenchEnv, jobs: int, seconds: int) -> dict:
    http_port = free_port()
    path = env.write_noop_jobs(jobs, every=EVERY, prefix="rest")
    (node_id,) = env.start_nodes(path, count=1, extra_args=lambda _n: ["--http-listen", f"127.0.0.1:{http_port}"])
    env.wait_jobs_loaded(jobs)
    visit(env.cluster.nodes[node_id].address, f"http://127.0.0.1:{http_port}")
    pid = env.pids()[node_id]
    peak: list[str] = []
    with node_shape(env) as shape:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            names = thread_names(pid)
            if len(names) > len(peak):
                peak = names
            time.sleep(SAMPLE_EVERY_S)
    shape["threads_peak"] = max(shape["threads_peak"], len(peak))  # two samplers: the higher of their peaks
    return {
        "scenario": "rest",
        "db": db_kind(env.db),
        "jobs": jobs,
        "every": EVERY,
        "seconds": seconds,
        "threads": len(peak),
        "threads_by_name": grouped(peak),
        "target_threads": TARGET_THREADS,
        "target_met": len(peak) <= TARGET_THREADS,
        "node": shape,
    }


def render(f: dict) -> list[str]:
    return [
        tabulate(list(f["threads_by_name"].items()), headers=["thread (OS name)", "count"], tablefmt="github"),
        "",
        f"a node at rest on {f['db']} ({f['jobs']} jobs every {f['every']}, API and dashboard on, after a visit): "
        f"{f['threads']} threads at peak over {f['seconds']} s; {describe(f['node'])}",
        f"target (issue 32): <= {f['target_threads']} threads: {'met' if f['target_met'] else 'NOT met'}",
    ]


__all__ = ["TARGET_THREADS", "grouped", "render", "run", "thread_names"]
