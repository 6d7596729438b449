"""Prometheus metrics of a node, served by ``--metrics-listen host:port``.

Names follow Prometheus conventions (base units, ``_total`` counters). The
metric objects live here, once; the code that observes them imports them.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Lateness buckets from sub-millisecond to a minute: the interesting part is below 100 ms.
_LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Renewal lateness: its target is 100 ms at p99, and a TTL of lateness loses the session.
_RENEWAL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class CountedHistogram(Collector):
    """A histogram with one label that takes a count with each value: ``observe(label, value, count)``.

    prometheus_client's ``Histogram.observe`` takes one value per call, a
    lock and a bisection each: at 10,000 starts a second that was a quarter
    of the dispatcher's CPU. A burst's starts share a handful of distinct
    lateness values (milliseconds), so the dispatcher counts them and
    observes each distinct value once, with its count. Exposed as a standard
    histogram (``_bucket``, ``_sum``, ``_count``) through prometheus_client's
    own ``HistogramMetricFamily``.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        buckets: tuple[float, ...],
        registry: CollectorRegistry | None = REGISTRY,
    ):
        self._name, self._doc, self._label = name, documentation, label
        self._bounds = tuple(buckets)  # upper bounds; +Inf is the last bucket, implied
        self._lock = threading.Lock()
        self._series: dict[str, tuple[list[int], list[float]]] = {}  # label -> (per-bucket counts, [sum])
        if registry is not None:
            registry.register(self)

    def observe(self, label: str, value: float, count: int = 1) -> None:
        i = bisect.bisect_left(self._bounds, value)  # the first bound >= value: "le" is inclusive
        with self._lock:
            series = self._series.get(label)
            if series is None:
                series = self._series[label] = ([0] * (len(self._bounds) + 1), [0.0])
            series[0][i] += count
            series[1][0] += value * count

    def describe(self):
        return [HistogramMetricFamily(self._name, self._doc, labels=[self._label])]

    def collect(self):
        family = HistogramMetricFamily(self._name, self._doc, labels=[self._label])
        with self._lock:
            series = {label: (list(counts), total[0]) for label, (counts, total) in self._series.items()}
        for label, (counts, total) in sorted(series.items()):
            cumulative = list(itertools.accumulate(counts))
            buckets = [(repr(float(b)), n) for b, n in zip(self._bounds, cumulative, strict=False)] + [
                ("+Inf", cumulative[-1])
            ]
            family.add_metric([label], buckets, total)
        yield family


tick_lateness = CountedHistogram(
    "shardcron_tick_lateness_seconds", "Executor start minus scheduled time.", "shard", _LATENESS_BUCKETS
)
ticks = Counter(
    "shardcron_ticks_total", "Ticks recorded by this node, by namespace and final status.", ["namespace", "status"]
)
caught_up = Counter("shardcron_caught_up_slots_total", "Missed slots claimed and run on taking a shard over.")
calendar_skips = Counter(
    "shardcron_calendar_skips_total", "Times a job's next claim jumped over slots its calendars exclude."
)
calendar_reloads = Counter("shardcron_calendar_reloads_total", "Reloads of the stored calendars, by cause.", ["cause"])
namespace_reloads = Counter(
    "shardcron_namespace_reloads_total", "Reloads of the stored namespaces' weights and quotas, by cause.", ["cause"]
)
notifications = Counter(
    "shardcron_notifications_total",
    "Notifications (failures, recoveries, missed deadlines), by kind and outcome: sent, suppressed, "
    "retrying (a round of sends failed: tried again later), failed (given up a day after the claim).",
    ["kind", "outcome"],
)
deadline_missed = Counter(
    "shardcron_deadline_missed_total",
    "Deadlines missed by slots of the shards this node leads, by namespace, job and kind "
    "(start_deadline, deadline, heartbeat); each miss is counted once, by the leader that recorded it.",
    ["namespace", "job", "kind"],
)
fenced_writes = Counter("shardcron_fenced_writes_total", "Writes rejected because a newer fence exists.")
not_started = Counter(
    "shardcron_ticks_not_started_total",
    "Claimed ticks this node did not start (shard lost or lease not provably held).",
)
forwarded_putjobs = Counter(
    "shardcron_forwarded_putjob_calls_total",
    "PutJob calls this node forwarded to their shard's leader, by how they were sent: alone (a PutJob) or "
    "combined (with others of the same caller in one PutJobEach).",
    ["sent"],
)
leader_changes = Counter("shardcron_leader_changes_total", "Shards this node started or stopped leading.", ["change"])
takeover = Histogram(
    "shardcron_shard_takeover_seconds",
    "From winning a shard's election to its jobs, last ticks and orphans loaded: ready to tick.",
    buckets=_CALL_BUCKETS,
)
shards_led = Gauge("shardcron_shards_led", "Shards this node leads now.")
session_alive = Gauge("shardcron_session_alive", "1 while the node holds its etcd lease, else 0.")
lease_renewal_age = Gauge("shardcron_lease_renewal_age_seconds", "Seconds since the last confirmed lease renewal.")
lease_renewal_lateness = Histogram(
    "shardcron_lease_renewal_lateness_seconds",
    "When etcd confirmed a lease renewal, minus when it was due (TTL/3 after the renewal before it was sent): "
    "how far the keep-alive fell behind. A renewal a TTL late is a lost session.",
    buckets=_RENEWAL_BUCKETS,
)
event_loops = Gauge("shardcron_event_loops", "asyncio event loops running in this node now.")
etcd_call = Histogram("shardcron_etcd_call_seconds", "etcd call latency.", ["op"], buckets=_CALL_BUCKETS)
db_call = Histogram("shardcron_db_call_seconds", "Database statement latency.", ["op"], buckets=_CALL_BUCKETS)
running_executors = Gauge("shardcron_running_executors", "Executors running now.")
results_unwritten = Gauge(
    "shardcron_results_unwritten", "Tick results waiting to be written; growing means the result writer is stuck."
)
ticks_pruned = Counter(
    "shardcron_ticks_pruned_total",
    "Tick rows this node deleted as a shard's leader, by rule (retention, history_limit).",
    ["reason"],
)
oldest_overdue = Gauge(
    "shardcron_oldest_overdue_slot_seconds",
    "Age of the oldest slot that is due but not started; 0 when none. "
    "Alert on it to catch a schedule that silently stopped.",
)
backfill_slots = Counter("shardcron_backfill_slots_total", "Slots claimed and started by backfills on this node.")
namespace_wait = CountedHistogram(
    "shardcron_namespace_wait_seconds",
    "Time a start waited for a free executor slot, by namespace (only starts that "
    "waited: --executor-slots were all busy, or the namespace was at max_running).",
    "namespace",
    _LATENESS_BUCKETS,
)
backfill_remaining = Gauge(
    "shardcron_backfill_remaining_slots",
    "Slots the backfills this node runs still owe (planned minus done); 0 when none.",
)


class LabelledGaugeFunction(Collector):
    """A gauge with one label, read at scrape time from ``watch(fn)``: ``fn() -> {label: value}``.

    The starts waiting per namespace change with every start under overload; counting
    them at scrape time costs the hot path nothing."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry | None = REGISTRY):
        self._name, self._doc, self._label = name, documentation, label
        self._fn: Callable[[], dict[str, float]] = dict
        if registry is not None:
            registry.register(self)

    def watch(self, fn: Callable[[], dict[str, float]]) -> None:
        self._fn = fn

    def describe(self):
        return [GaugeMetricFamily(self._name, self._doc, labels=[self._label])]

    def collect(self):
        family = GaugeMetricFamily(self._name, self._doc, labels=[self._label])
        try:
            values = self._fn()
        except Exception:  # noqa: BLE001 - a scrape must never fail because of one gauge
            values = {}
        for label, value in sorted(values.items()):
            family.add_metric([label], float(value))
        yield family


namespace_waiting = LabelledGaugeFunction(
    "shardcron_namespace_waiting", "Starts waiting for a free executor slot now, by namespace.", "namespace"
)


def watch_gauge(gauge: Gauge, fn: Callable[[], float]) -> None:
    """Compute ``gauge`` at scrape time; a failing probe reads as 0 rather than breaking the scrape."""

    def safe() -> float:
        try:
            return float(fn())
        except Exception:  # noqa: BLE001 - a scrape must never fail because of one gauge
            return 0.0

    gauge.set_function(safe)


def instrument_engine(engine) -> None:
    """Time every statement the engine runs, labelled by its first keyword."""
    from sqlalchemy import event  # heavy: imported by the node that has an engine, not by every user of metrics

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn, cursor, statement, parameters, context, executemany):
        conn.info.setdefault("shardcron_t0", []).append(time.perf_counter())

    children: dict[str, Histogram] = {}  # labels() costs more than observe(): one child per keyword

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn, cursor, statement, parameters, context, executemany):
        starts = conn.info.get("shardcron_t0")
        if starts:
            op = statement.lstrip().split(None, 1)[0].lower() if statement.strip() else "other"
            child = children.get(op)
            if child is None:
                child = children[op] = db_call.labels(op)
            child.observe(time.perf_counter() - starts.pop())
