"""The node's own metrics over time, for the health page's charts.

A sampler task on the node's event loop reads this node's Prometheus
registry every ``every_s`` and keeps the last ``keep`` readings (an hour at
the defaults). The registry walk runs on a worker thread (it calls the node's
gauges' callbacks, which take the scheduler's locks): the loop only waits for
it, and keeps the readings, so they need no lock. The charts are
differences between consecutive readings: lateness percentiles per shard
(from the lateness histogram's buckets, interpolated as Prometheus'
``histogram_quantile`` does), and fenced writes, caught-up slots and failed
ticks per interval. The maths is pure, below, and table-tested.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TypedDict

from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

LATENESS = "shardcron_tick_lateness_seconds"
FENCED = "shardcron_fenced_writes"
CAUGHT_UP = "shardcron_caught_up_slots"
TICKS = "shardcron_ticks"


@dataclass(frozen=True)
class Reading:
    at_s: float
    bounds: tuple[float, ...] = ()  # the lateness buckets' finite upper bounds
    lateness: dict[str, tuple[int, ...]] = field(default_factory=dict)  # shard -> cumulative counts, +Inf last
    fenced: float = 0.0
    caught_up: float = 0.0
    failed: float = 0.0


def read_registry(families: Iterable, at_s: float) -> Reading:
    """One reading of the metric families a registry's ``collect()`` yields."""
    buckets: dict[str, dict[float, float]] = {}
    fenced = caught_up = failed = 0.0
    for family in families:
        for s in family.samples:
            if family.name == LATENESS and s.name.endswith("_bucket"):
                buckets.setdefault(s.labels.get("shard", ""), {})[float(s.labels["le"])] = s.value
            elif family.name == FENCED and s.name.endswith("_total"):
                fenced += s.value
            elif family.name == CAUGHT_UP and s.name.endswith("_total"):
                caught_up += s.value
            elif family.name == TICKS and s.name.endswith("_total") and s.labels.get("status") == "failed":
                failed += s.value
    bounds: tuple[float, ...] = ()
    lateness = {}
    for shard, by_le in buckets.items():
        les = sorted(by_le)
        bounds = tuple(le for le in les if math.isfinite(le))
        lateness[shard] = tuple(int(by_le[le]) for le in les)
    return Reading(at_s, bounds, lateness, fenced, caught_up, failed)


def quantile(bounds: Sequence[float], cumulative: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile of a histogram given by cumulative bucket counts (+Inf last); None when empty.

    As Prometheus' ``histogram_quantile``: linear within the bucket the rank
    falls in; a rank in the +Inf bucket reads as the highest finite bound.
    """
    total = cumulative[-1] if cumulative else 0
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0
    for bound, count in zip((*bounds, math.inf), cumulative, strict=False):  # a node's malformed reading: shortest
        if count >= rank:
            if math.isinf(bound):
                return bounds[-1] if bounds else None
            in_bucket = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / in_bucket if in_bucket else 1.0)
        lower_bound, lower_count = bound, count
    return bounds[-1] if bounds else None


class ChartSeries(TypedDict):
    t: list[float]
    lateness_p50_ms: dict[str, list[float | None]]
    lateness_p99_ms: dict[str, list[float | None]]
    fenced: list[float]
    caught_up: list[float]
    failed: list[float]


def chart_series(readings: Sequence[Reading]) -> ChartSeries:
    """What the health page draws, one point per interval between consecutive readings.

    ``lateness_ms``: shard -> [p50, p99 per interval] (None where the shard
    started nothing); ``fenced``, ``caught_up``, ``failed``: counts per interval.
    """
    shards = sorted({s for r in readings for s in r.lateness}, key=lambda s: (len(s), s))
    out = ChartSeries(
        t=[],
        lateness_p50_ms={s: [] for s in shards},
        lateness_p99_ms={s: [] for s in shards},
        fenced=[],
        caught_up=[],
        failed=[],
    )
    for before, after in itertools.pairwise(readings):
        out["t"].append(round(after.at_s, 3))
        for s in shards:
            now, then = after.lateness.get(s), before.lateness.get(s)
            delta = [a - b for a, b in zip(now, then or (0,) * len(now), strict=False)] if now else []
            for per_shard, q in ((out["lateness_p50_ms"], 0.5), (out["lateness_p99_ms"], 0.99)):
                value = quantile(after.bounds, delta, q) if delta else None
                per_shard[s].append(None if value is None else round(value * 1000, 3))
        out["fenced"].append(max(0.0, after.fenced - before.fenced))
        out["caught_up"].append(max(0.0, after.caught_up - before.caught_up))
        out["failed"].append(max(0.0, after.failed - before.failed))
    return out


class MetricsHistory:
    """Samples ``registry`` every ``every_s`` in a task on the loop ``start()`` is called on; ``series()``
    (on that loop too) for the charts. A crash of the task is a death reported to ``lifeline``; its end by
    ``stop()`` is not."""

    def __init__(self, registry, *, every_s: float = 5.0, keep: int = 721, lifeline: Lifeline = UNWATCHED):
        self._registry = registry
        self._every_s = every_s
        self._readings: deque[Reading] = deque(maxlen=keep)
        self._stopping = threading.Event()  # the lifeline's: a sampler that ends after stop() has not died
        self._lifeline = Lifeline(lifeline.report, stopping=self._stopping)
        self._wake = asyncio.Event()  # set on the loop by stop(): the sampler's wait ends at once
        self._task: asyncio.Task | None = None
        self._pool: Executor | None = None

    def start(self, pool: Executor | None = None) -> MetricsHistory:
        """On the loop: the sampler's task, which takes its first reading at once, on ``pool`` (the API's;
        None: the loop's default executor)."""
        self._pool = pool
        self._task = self._lifeline.task(asyncio.get_running_loop(), self._run(), "dashboard-metrics")
        return self

    async def stop(self, timeout_s: float = 5.0) -> None:
        """On the loop: end the sampler, waiting at most ``timeout_s`` for a reading in progress (a stuck
        collector must not hold up the node's stop: its worker thread is left to finish). Safe to call again."""
        self._stopping.set()
        self._wake.set()
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task], timeout=timeout_s)

    def read(self) -> Reading:
        """A reading of the registry now (it blocks for as long as the registry's collectors take)."""
        return read_registry(self._registry.collect(), time.time())

    def series(self) -> ChartSeries:
        return chart_series(list(self._readings))

    async def _run(self) -> None:
        while True:
            try:
                self._readings.append(await asyncio.get_running_loop().run_in_executor(self._pool, self.read))
            except Exception:  # noqa: BLE001 - a failed reading leaves a gap in a chart, nothing more
                pass
            try:
                await asyncio.wait_for(self._wake.wait(), self._every_s)
                return
            except TimeoutError:
                pass
            crashpoints.fail_worker("dashboard-metrics")
