"""The node's shape over a benchmark window: its OS threads and event loops at peak, and how late its keep-alive was.

Threads are counted by the kernel (``/proc/<pid>/status``), so gRPC's and every
library's own threads are in the figure, sampled every ``SAMPLE_EVERY_S``.
Event loops and renewal lateness come from each node's own /metrics
(``shardcron_event_loops``, ``shardcron_lease_renewal_lateness_seconds``): the
lateness histogram is read as the window opens and as it closes, and its
percentiles are those of the renewals in between, given as the upper bound of
the bucket they fall in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from shardcron.dev.bench.harness import BenchEnv

SAMPLE_EVERY_S = 0.25
LATENESS = "shardcron_lease_renewal_lateness_seconds"
LOOPS = "shardcron_event_loops"


def thread_count(pid: int) -> int:
    """The OS threads of process ``pid`` now (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def scrape(port: int) -> tuple[dict[float, float], float]:
    """A node's renewal-lateness buckets (upper bound in s -> cumulative count) and its event loops now."""
    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    buckets: dict[float, float] = {}
    loops = 0.0
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == f"{LATENESS}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name == LOOPS:
                loops = sample.value
    return buckets, loops


def bucket_percentile(counts: dict[float, float], p: float) -> float | None:
    """The upper bound of the bucket holding the ``p``th percentile of cumulative ``counts`` (None if empty)."""
    bounds = sorted(counts)
    total = counts[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    return next(b for b in bounds if counts[b] >= p / 100 * total)


def lateness_figures(before: dict[float, float], after: dict[float, float]) -> dict:
    """Renewals between two scrapes and their lateness percentiles, in ms (bucket upper bounds)."""
    moved = {bound: after[bound] - before.get(bound, 0.0) for bound in after}
    renewals = int(moved.get(float("inf"), 0))

    def ms(p: float) -> float | None:
        bound = bucket_percentile(moved, p)
        return None if bound is None else round(bound * 1000, 1)

    return {"renewals": renewals, "p99": ms(99), "max": ms(100)}


@contextmanager
def node_shape(env: BenchEnv) -> Iterator[dict]:
    """Entered as a window opens; on leaving, the dict holds the window's ``threads_peak`` (the busiest node's),
    ``event_loops`` (at most, of any node) and ``renewal_lateness_ms`` (every node's renewals together)."""
    pids = env.pids()
    ports = dict(env.metrics_ports)
    before = {node: scrape(port) for node, port in ports.items()}
    peak = {node: thread_count(pid) for node, pid in pids.items()}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_EVERY_S):
            for node, pid in pids.items():
                peak[node] = max(peak[node], thread_count(pid))

    sampler = threading.Thread(target=sample, name="bench-thread-sampler", daemon=True)
    sampler.start()
    shape: dict = {}
    try:
        yield shape
    finally:
        stop.set()
        sampler.join()
        after = {node: scrape(port) for node, port in ports.items() if node in pids}
        summed_before: dict[float, float] = {}
        summed_after: dict[float, float] = {}
        for node, (buckets, _) in after.items():
            for bound, count in buckets.items():
                summed_after[bound] = summed_after.get(bound, 0.0) + count
                summed_before[bound] = summed_before.get(bound, 0.0) + before[node][0].get(bound, 0.0)
        loops = [n for _, n in before.values()] + [n for _, n in after.values()]
        shape.update(
            threads_peak=max(peak.values(), default=0),
            event_loops=int(max(loops, default=0)),
            renewal_lateness_ms=lateness_figures(summed_before, summed_after) if ports else None,
        )


# Table columns for a report with a row per window: threads at peak, event loops, renewal lateness p99 (<= ms).
COLUMNS = ["threads", "loops", "renewal p99 <= ms"]


def columns(shape: dict | None) -> list:
    """The ``COLUMNS`` of one window ("-" where not measured)."""
    if not shape:
        return ["-", "-", "-"]
    renewal = shape.get("renewal_lateness_ms") or {}
    return [shape["threads_peak"], shape["event_loops"], "-" if renewal.get("p99") is None else renewal["p99"]]


def describe(shape: dict | None) -> str:
    """One line for a report: "node: 31 threads at peak, 2 event loops; keep-alive: 9 renewals, lateness
    p99 <= 5 ms, max <= 10 ms"."""
    if not shape:
        return "node: not measured"
    loops = shape["event_loops"]
    line = f"node: {shape['threads_peak']} threads at peak, {loops} event loop{'' if loops == 1 else 's'}"
    renewal = shape.get("renewal_lateness_ms")
    if not renewal:
        return line + "; keep-alive: not measured (no /metrics)"
    if not renewal["renewals"]:
        return line + "; keep-alive: no renewal in the window"
    return (
        f"{line}; keep-alive: {renewal['renewals']} renewals, lateness p99 <= {renewal['p99']} ms, "
        f"max <= {renewal['max']} ms"
    )


__all__ = [
    "COLUMNS",
    "bucket_percentile",
    "columns",
    "describe",
    "lateness_figures",
    "node_shape",
    "scrape",
    "thread_count",
]
