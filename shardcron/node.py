"""The composition root: wires store, etcd, coordinator and scheduler; owns start and stop.

A node has one asyncio event loop (``runtime.node_loop``), made here and
handed to the executors (every tick's coroutine), the API server and the
dashboard; it stops last, once those three have stopped.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from shardcron import clock, metrics
from shardcron.api.server import ApiServer, start_server
from shardcron.config import NodeConfig
from shardcron.coordination.calendar_book import CalendarBook
from shardcron.coordination.calendar_watch import CalendarWatch
from shardcron.coordination.cluster_config import ClusterConfig
from shardcron.coordination.coordinator import Coordinator
from shardcron.coordination.coordinator_settings import CoordinatorSettings, step_budget
from shardcron.coordination.etcd import Etcd, parse_endpoints
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.membership import ensure_cluster_config
from shardcron.coordination.namespace_watch import NamespaceWatch
from shardcron.coordination.store_watch import WatchTask
from shardcron.coordination.view import shard_map_from_view
from shardcron.dashboard import require_extra as require_dashboard_extra
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.server import Dashboard, DashboardServer
from shardcron.errors import ConfigError, EtcdUnavailable, InvalidJob, StoreUnavailable
from shardcron.executors.admission import check_admissible
from shardcron.leader.loop import Scheduler
from shardcron.leader.notifier import Notifier
from shardcron.leader.recorder import ResultWrite
from shardcron.model import Job, SlotRef, Tick
from shardcron.rules.notifications import NO_DEFAULTS
from shardcron.runtime.lifeline import EXIT_WORKER_DIED, Lifeline, stack_of
from shardcron.runtime.metrics_http import MetricsServer
from shardcron.runtime.node_loop import NodeLoop
from shardcron.runtime.one_at_a_time import OneAtATime
from shardcron.runtime.steps import WorkerStalled
from shardcron.runtime.thread_names import name_os_threads
from shardcron.spec.calendar import Calendar
from shardcron.spec.jobfile import JobFileError, load_file_calendars, load_job_file
from shardcron.store.calendars import import_calendars
from shardcron.store.engine import describe_url, make_engine, normalise_url
from shardcron.store.epoch import FenceEpoch, claim_epoch, highest_fence
from shardcron.store.fences import ensure_shards
from shardcron.store.migrate import ensure_schema
from shardcron.tracing.setup import Tracing, tracing_from_env

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long a stopped node's process may take to exit once its shards are handed over and its lease revoked.
EXIT_WITHIN_S = 10.0
# Beyond the store's wait (--store-wait), how long a start-up may take before the node shows every thread's stack.
START_STACKS_AFTER_S = 60.0
# The cyclic collector's thresholds once the node runs (gc.set_threshold): a young collection every 10,000
# net allocations of container objects, where CPython collects every 700. A leader allocates a few dozen
# per tick, so at thousands of ticks a second the default collected hundreds of times a second and moved
# every tick in flight into the older generations. ADR 10 has the measurements and the trade-off.
GC_THRESHOLDS = (10_000, 10, 10)


class StoppedWhileStarting(Exception):
    """A stop was asked while the node waited at start-up: it exits 0, having led nothing."""


class NodeBackend:
    """The API's view of this node (``abc.Backend``), made once ``Node.start`` has made the parts it reads."""

    def __init__(self, node: Node):
        self._coordinator, self._scheduler = _started(node.coordinator), _started(node.scheduler)
        self._calendar_watch, self._namespace_watch = _started(node.calendar_watch), _started(node.namespace_watch)
        self._cluster_config, self.engine = _started(node.cluster_config), _started(node.engine)
        self.node_id = node.cfg.node_id
        self.allow_shell = node.cfg.allow_shell
        self.shell_allow = node.cfg.shell_allow
        self.allow_python = node.cfg.allow_python
        self.joined = self._coordinator.joined
        self.lifeline = node.lifeline  # the API's and the dashboard's long-lived threads and tasks report through it
        self.etcd = _started(node.etcd)  # the API's forwarding seal and token watch live under the cluster's prefix
        self.layout = node.layout
        self.calendars: CalendarBook = self._scheduler.calendars  # the calendars this node schedules by
        # Replaced, never changed in place: the recorder reads it for every batch without the lock.
        self._listeners: tuple[Callable[[list[Tick]], None], ...] = ()
        self._lock = threading.Lock()
        self._scheduler.recorder.listeners.append(self._fan_out)

    @property
    def min_interval_ms(self) -> int:
        """The cluster's minimum interval as mirrored now (``shardcron config`` changes it live);
        before the coordinator has mirrored the config, the value read at start."""
        with self._coordinator.view_lock:
            live = self._coordinator.view.min_interval_ms
        return self._cluster_config.min_interval_ms if live is None else live

    @property
    def shard_count(self) -> int:
        return self._coordinator.s.shard_count  # changes when the cluster is resharded

    def fence_if_leader(self, shard: int) -> int | None:
        # The coordinator publishes its led shards' fences under a lock (its slots
        # belong to its control thread); the scheduler must also hold the shard.
        fence = self._coordinator.leader_fence(shard)
        if fence is None or shard not in self._scheduler.led_shards():
            return None
        return fence

    def leader_address(self, shard: int) -> str | None:
        with self._coordinator.view_lock:
            leader = self._coordinator.view.leader(shard)
        return leader.address if leader and leader.leader_since_ms else None

    def job_written(self, shard: int, job: Job) -> None:
        self._scheduler.upsert_job(shard, job)

    def job_deleted(self, shard: int, job_id: str) -> None:
        self._scheduler.remove_job(shard, job_id)

    def trigger_now(self, shard: int, job_id: str) -> SlotRef:
        return self._scheduler.trigger_now(shard, job_id)

    def calendar_written(self, name: str, calendar: Calendar | None, now_ms: int) -> None:
        """This node put (``calendar``) or deleted (None) calendar ``name``: known and followed here at
        once (the reload the bump brings then finds nothing changed here), then every other node reloads."""
        book = self._scheduler.calendars
        if book.put(calendar) if calendar is not None else book.remove(name):
            self._scheduler.calendars_changed({name})
        self._calendar_watch.bump(name, now_ms)

    def namespace_written(self, name: str, now_ms: int) -> None:
        """This node created, changed or deleted namespace ``name``: every node (this one through the
        watch) reloads the namespaces' weights and quotas."""
        self._namespace_watch.bump(name, now_ms)

    def backfill_added(self, shard: int) -> None:
        self._scheduler.backfills.backfill_added(shard)

    def shard_map(self) -> dict:
        with self._coordinator.view_lock:
            return shard_map_from_view(self._coordinator.view, self.layout.prefix)

    def subscribe_ticks(self, callback: Callable[[list[Tick]], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners = (*self._listeners, callback)

        def unsubscribe() -> None:
            with self._lock:
                remaining = list(self._listeners)
                if callback in remaining:
                    remaining.remove(callback)
                self._listeners = tuple(remaining)

        return unsubscribe

    def _fan_out(self, writes: list[ResultWrite]) -> None:
        listeners = self._listeners
        if not listeners:  # most batches: nobody watches, and building the events is most of the cost
            return
        # What WatchTicks streams: the result as written, without the output (up to 64 KiB
        # a tick, fanned out to every watcher); ListTicks has it.
        events = [
            Tick(
                w.slot.job_id,
                w.slot.scheduled_at_ms,
                w.shard,
                w.fence,
                self.node_id,
                w.status,
                w.attempt,
                started_at_ms=w.result.started_at_ms,
                finished_at_ms=w.result.finished_at_ms,
                exit_code=w.result.exit_code,
                http_status=w.result.http_status,
                error=w.result.error,
            )
            for w in writes
        ]
        for cb in listeners:
            try:
                cb(events)
            except Exception:  # noqa: BLE001 - a slow or broken watcher must not hurt the recorder
                log.exception("tick listener failed")


class Node:
    def __init__(self, cfg: NodeConfig):
        self.cfg = cfg
        self.layout = KeyLayout(cfg.prefix)
        self.stopping = threading.Event()
        # Every long-lived thread and task is spawned through it: the first to die stops the node (worker_died).
        self.lifeline = Lifeline(self.worker_died, stopping=self.stopping)
        self.died: str | None = None  # the worker whose death stops this node
        self.died_of: BaseException | None = None  # what it died of (None: it returned)
        self.engine: Engine | None = None
        self.etcd: Etcd | None = None
        self.scheduler: Scheduler | None = None
        self.calendar_watch: CalendarWatch | None = None
        self.namespace_watch: NamespaceWatch | None = None
        self.settings: WatchTask | None = None  # the calendars', namespaces' and tokens' watches run on it
        self.background: OneAtATime | None = None  # the background passes' turn on the API's pool
        self.coordinator: Coordinator | None = None
        self._coord_thread: threading.Thread | None = None
        self.cluster_config: ClusterConfig | None = None  # as read at start; the view mirrors it live
        self.api: ApiServer | None = None
        self.dashboard: DashboardServer | None = None
        self.loop: NodeLoop | None = None
        self.metrics_server: MetricsServer | None = None
        self.tracing: Tracing | None = None  # OTEL_* asks for tracing (tracing/settings.py)

    def start(self) -> None:
        """Connect to everything and join. Raises a ShardcronError with a clear message on bad set-up."""
        cfg = self.cfg
        now = clock.wall_ms()

        def admit(min_interval_ms: int) -> Callable[[Job], None]:
            return lambda job: check_admissible(
                job,
                allow_shell=cfg.allow_shell,
                now_ms=now,
                shell_allow=cfg.shell_allow,
                min_interval_ms=min_interval_ms,
                allow_python=cfg.allow_python,
                store_dialect=_dialect(cfg.db),
            )

        # The file is read and checked before anything connects (a typo fails fast);
        # the cluster's minimum interval is known only once etcd answers, below.
        imports = load_job_file(cfg.jobs, admit=admit(0)) if cfg.jobs else []
        file_calendars = load_file_calendars(cfg.jobs) if cfg.jobs else []

        if cfg.http_listen:
            require_dashboard_extra()  # before anything connects: a missing extra is a clear error at once
        # Likewise the otel extra, when the environment asks for tracing; without it, opentelemetry is never imported.
        self.tracing = tracing = tracing_from_env(os.environ, cfg.node_id)
        # The node's one event loop: the ticks, the API, the dashboard, /metrics and etcd's watches await on it
        # (runtime/node_loop.py).
        self.loop = NodeLoop(lifeline=self.lifeline).start()
        if cfg.metrics_listen and cfg.metrics_listen != cfg.http_listen:  # else the dashboard serves /metrics
            self.metrics_server = MetricsServer(
                cfg.metrics_listen, self.loop, lambda: self.api.pool if self.api is not None else None
            ).start()
        self.engine = engine = self._through_store_outage("the store", lambda: make_engine(cfg.db))
        metrics.instrument_engine(engine)
        # An empty database gets the schema; an older or newer one is refused, naming both
        # versions: upgrades are an operator's step (`shardcron db upgrade`).
        self._through_store_outage("the store's schema", lambda: ensure_schema(engine, auto_upgrade=False))
        log.info("store ready at %s", describe_url(cfg.db))

        self.etcd = Etcd(cfg.etcd, timeout_s=min(5.0, cfg.ttl / 3.0), security=cfg.etcd_security, loop=self.loop)
        self.epoch = self._through_store_outage(
            "etcd's identity", lambda: self._on_any_member(self._check_etcd_identity)
        )
        self.cluster_config = self._on_any_member(
            lambda: ensure_cluster_config(self.etcd, self.layout, cfg.shards, now, cfg.min_interval_ms)
        )
        shard_count = self.cluster_config.shards
        _admit_imports(cfg.jobs, imports, admit(self.cluster_config.min_interval_ms))
        self._through_store_outage("the shards' fence rows", lambda: ensure_shards(engine, shard_count))

        calendars = CalendarBook()
        self.scheduler = Scheduler(
            self.engine,
            cfg.node_id,
            shard_count,
            allow_shell=cfg.allow_shell,
            allow_python=cfg.allow_python,
            lookahead_ms=cfg.lookahead_ms,
            tick_retention_ms=cfg.tick_retention_ms,
            executor_slots=cfg.executor_slots,
            fair_queuing=cfg.fair_queuing,
            on_fenced=lambda shard, fence: _started(self.coordinator).report_fenced(shard, fence),
            imports=imports,
            calendars=calendars,
            lifeline=self.lifeline,
            loop=self.loop,
            tick_spans=tracing.tick_spans if tracing is not None else None,
        )
        self.calendar_watch = CalendarWatch(
            self.etcd, self.layout, self.engine, calendars, self.scheduler.calendars_changed, lifeline=self.lifeline
        )
        if file_calendars:
            written = self._through_store_outage(
                "the job file's calendars",
                lambda: import_calendars(engine, file_calendars, node_id=cfg.node_id, now_ms=clock.wall_ms()),
            )
            if written:
                self.calendar_watch.bump(",".join(written), clock.wall_ms())
        # Before any shard is led: its first claims follow the calendars.
        self._through_store_outage("the calendars", self.calendar_watch.load_now)
        self.namespace_watch = NamespaceWatch(
            self.etcd, self.layout, self.engine, self.scheduler.set_namespace_settings, lifeline=self.lifeline
        )
        # Likewise: its first starts follow the namespaces' weights and quotas.
        self._through_store_outage("the namespaces", self.namespace_watch.load_now)
        settings = CoordinatorSettings(
            node_id=cfg.node_id,
            address=cfg.advertise,
            shard_count=shard_count,
            ttl_s=cfg.ttl,
            settle_s=cfg.settle,
            resign_grace_s=cfg.shutdown_grace,
            started_at_ms=now,
            fence_offset=self.epoch.offset,
            step_budget_s=step_budget(etcd_call_s=self.etcd.timeout_s),
        )
        self.coordinator = coordinator = Coordinator(
            self.etcd, self.layout, settings, self.scheduler, verify_etcd=self._verify_etcd, lifeline=self.lifeline
        )
        self.shard_count = shard_count
        self.backend = NodeBackend(self)
        # One task on the loop for the calendars', namespaces' and API tokens' watches (coordination/store_watch).
        self.settings = WatchTask("settings", self.loop, lifeline=self.lifeline)
        self.api = start_server(
            self.backend, cfg, self.loop, self.settings, tracer=tracing.tracer if tracing is not None else None
        )
        # The background passes (the settings', the notifier's, the dashboard's metrics readings) take turns on
        # one of the API's workers: at rest they cost no thread of their own (runtime/one_at_a_time).
        self.background = OneAtATime(self.api.pool)
        if cfg.http_listen:
            self.dashboard = _start_dashboard(self, cfg.http_listen)
        metrics.watch_gauge(metrics.oldest_overdue, self.scheduler.oldest_overdue_s)
        metrics.watch_gauge(
            metrics.lease_renewal_age, lambda: coordinator.session.seconds_since_renewal() if coordinator.session else 0
        )
        self.scheduler.start()
        self.calendar_watch.start(self.settings)
        self.namespace_watch.start(self.settings)
        self.settings.start(self.background)
        self.notifier = Notifier(
            self.scheduler,
            loop=self.loop,
            pool=self.background,
            defaults=cfg.notify_defaults or NO_DEFAULTS,
            default_rate=cfg.notify_rate,
            lifeline=self.lifeline,
        )
        self.notifier.start()
        # Its return is the node's to handle (wait() sees ``stopped``); only a raise is a death.
        self._coord_thread = self.lifeline.thread(self.coordinator.run, "coordinator", may_end=True)
        self._coord_thread.start()
        log.info("node %s started: %d shards, ttl %ss, etcd %s", cfg.node_id, shard_count, cfg.ttl, cfg.etcd)

    def _through_store_outage(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, tried again while the store is unavailable, for up to ``--store-wait`` seconds: a node
        (re)started while its store is cut off or restarting waits for it, as it waits for etcd, rather than
        exit. A stop asked meanwhile ends the wait (``StoppedWhileStarting``)."""

        def sleep_unless_stopping(seconds: float) -> None:
            if self.stopping.wait(seconds):
                raise StoppedWhileStarting(f"stopped while waiting for {what}")

        def say_why(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            delay = state.next_action.sleep if state.next_action else 0.0
            log.warning(
                "%s: %s; trying again in %.1fs (a starting node waits up to --store-wait %gs for its store)",
                what,
                error,
                delay,
                self.cfg.store_wait,
            )

        for attempt in Retrying(
            retry=retry_if_exception_type(StoreUnavailable),
            stop=stop_after_delay(self.cfg.store_wait),
            wait=wait_exponential(multiplier=0.5, max=5.0),
            sleep=sleep_unless_stopping,
            before_sleep=say_why,
            reraise=True,
        ):
            with attempt:
                return call()
        raise AssertionError("unreachable: Retrying either returns or raises")

    def _on_any_member(self, call):
        """``call()``, tried once on each etcd member in turn: a node (re)started while one member is down must
        start, since a quorum still answers (a failed call moves the client to the next member). With every
        member down it fails as before, naming them."""
        for left in range(len(parse_endpoints(self.cfg.etcd)) - 1, -1, -1):
            try:
                return call()
            except EtcdUnavailable as e:
                if not left:
                    raise
                log.warning("%s; trying the next etcd member", e)

    def _check_etcd_identity(self) -> FenceEpoch:
        """Refuse to claim under an etcd cluster other than the one the stored fences came from."""
        etcd, engine = _started(self.etcd), _started(self.engine)
        cluster_id, revision = etcd.status()
        epoch = claim_epoch(engine, cluster_id)
        if epoch.cluster_id != cluster_id:
            raise ConfigError(
                f"etcd has forgotten: its cluster id is {cluster_id:x} (revision {revision}), but the store's fences "
                f"were recorded under cluster {epoch.cluster_id:x} (highest fence {highest_fence(engine)}). "
                "It was rebuilt or restored from a snapshot, so its revisions cannot fence writes. Make sure no node "
                "of the old cluster still runs, then run `shardcron fences rebase --db ... --etcd ...`"
            )
        return epoch

    def _verify_etcd(self) -> None:
        self._check_etcd_identity()  # the coordinator's check on each new session: only a raise matters

    def worker_died(self, name: str, error: BaseException | None) -> None:
        """The lifeline's report of the first worker to die (on the dying thread, or on its watcher's for a
        stall): the node stops at once (``wait`` wakes and does it)."""
        self.died, self.died_of = name, error
        if isinstance(error, WorkerStalled):
            what, error = f"is stuck: {error}", None  # reported by its watcher, never raised: no traceback
        else:
            what = f"died: {error!r}" if error is not None else "ended unexpectedly"
        log.error(
            "worker %r %s; the node stops now: its shards are handed over at once, its lease revoked, and it "
            "exits with code %d for its supervisor to restart it",
            name,
            what,
            EXIT_WORKER_DIED,
            exc_info=error,
        )
        self.stopping.set()

    def request_stop(self, *_args) -> None:
        if not self.stopping.is_set():
            log.info("stop requested: handing shards over (grace %.1fs)", self.cfg.shutdown_grace)
            self.stopping.set()
            if self.coordinator:
                self.coordinator.request_stop()

    def wait(self) -> None:
        """Block until stopped; then shut down in order: shards handed over, lease revoked, store closed."""
        while not self.stopping.wait(0.5):
            if self.coordinator and self.coordinator.stopped.is_set():
                break
        coordinator = self.coordinator
        if coordinator is not None:
            if isinstance(self.died_of, WorkerStalled):
                # Stuck in a step: there is no hand-over to wait for.
                self._give_up_on_coordinator(str(self.died_of))
            else:
                if self.died is not None:
                    # Shards resign without a grace: nothing waits for the dead worker's part.
                    coordinator.request_stop(grace_s=0.0)
                    limit = float(self.cfg.ttl)
                else:
                    limit = self.cfg.shutdown_grace + self.cfg.ttl + 5  # the shards' grace, then the lease's revoke
                if not coordinator.stopped.wait(limit):
                    self._give_up_on_coordinator(f"the coordinator has not handed the shards over within {limit:.0f}s")
        self.close()

    def _give_up_on_coordinator(self, why: str) -> None:
        """The coordinator hangs (or is what died and revoked nothing): its lease must not outlive the node, or
        its shards wait a TTL for a successor. Where it hangs is what to mend."""
        log.warning("%s; revoking the lease. It is at:\n%s", why, stack_of(self._coord_thread))
        _started(self.coordinator).revoke_lease()
        self.died = self.died or "coordinator"  # a hang is a failure too: exit EXIT_WORKER_DIED

    def close(self) -> None:
        self.stopping.set()  # what ends from here on ends on purpose (lifeline.py)
        if self.metrics_server:
            self.metrics_server.stop()  # before the API, whose pool its scrapes use
        if self.dashboard:
            self.dashboard.stop()
        # Before the API: their passes run on its pool, which stops with it.
        if self.settings:
            self.settings.stop()  # before the watches: a pass under way could otherwise watch again what is stopped
        if self.calendar_watch:
            self.calendar_watch.stop()
        if self.namespace_watch:
            self.namespace_watch.stop()
        if getattr(self, "notifier", None):
            self.notifier.close()
        if self.api:
            self.api.stop()
        if self.scheduler:
            self.scheduler.close()  # the executors with it
        if self.etcd:
            self.etcd.close()  # its watches end on the loop, so before the loop
        if self.loop:
            self.loop.close()  # last of what awaits: the dashboard, the API and the executors have stopped
        if self.engine is not None:
            self.engine.dispose()
        if self.tracing is not None:
            self.tracing.shutdown()  # after the scheduler and the API: their last spans are exported too
        log.info("node %s stopped", self.cfg.node_id)


def _admit_imports(path: str | None, jobs: list[Job], admit: Callable[[Job], None]) -> None:
    """Check the file's jobs again now that the cluster's minimum interval is known; an error reads
    as ``load_job_file``'s do: the file, the job, the field."""
    for job in jobs:
        try:
            admit(job)
        except InvalidJob as e:
            raise JobFileError(f"{path}: job {job.id!r}: {e}") from None


def _start_dashboard(node: Node, listen: str) -> DashboardServer:
    cfg, sec = node.cfg, node.cfg.api_security
    tls_files = (sec.cert_file, sec.key_file) if sec is not None and sec.cert_file else None
    dashboard = Dashboard(
        node_id=cfg.node_id,
        api=_started(node.api).in_process,
        tokens=getattr(node.api, "tokens", None),
        history=MetricsHistory(REGISTRY, lifeline=node.lifeline),  # sampling from the server's start
        tls_files=tls_files,
        serve_metrics=cfg.metrics_listen == cfg.http_listen,
        sampler_pool=node.background,
        lifeline=node.lifeline,
    )
    server = DashboardServer(dashboard, listen, _started(node.loop)).start()
    log.info("dashboard on %s://%s", "https" if tls_files else "http", listen)
    return server


def run_node(cfg: NodeConfig) -> int:
    name_os_threads()
    node = Node(cfg)
    signal.signal(signal.SIGTERM, node.request_stop)
    signal.signal(signal.SIGINT, node.request_stop)
    # A start-up that hangs (seen once in a soak: a restarted node logged nothing for five minutes) shows where:
    # past the store's wait and a margin, every thread's stack goes to stderr, and start-up goes on.
    faulthandler.dump_traceback_later(cfg.store_wait + START_STACKS_AFTER_S, exit=False)
    try:
        node.start()
    except StoppedWhileStarting as e:
        log.info("%s: the node did not start", e)
        node.close()
        return 0
    except BaseException:
        node.close()
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()
    # The modules and start-up state (grpc, SQLAlchemy, the schema, ...) live as
    # long as the process: take them out of the collector's view, or every full
    # collection walks them all, a pause of tens of ms in which no tick starts.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    node.wait()
    # Everything is closed and the lease is revoked; what is left is the interpreter's own exit, which waits
    # for every thread pool's worker to finish its call. One stuck in a call (a store cut off) would keep a
    # stopped node's process alive until its supervisor kills it: past EXIT_WITHIN_S, every thread's stack
    # goes to stderr (where to mend it) and the process exits.
    faulthandler.dump_traceback_later(EXIT_WITHIN_S, exit=True)
    if node.coordinator and node.coordinator.fatal:
        raise ConfigError(node.coordinator.fatal)  # exit code 1, as any configuration error
    return EXIT_WORKER_DIED if node.died is not None else 0


def _started(part: T | None) -> T:
    if part is None:
        raise RuntimeError("the node has not started: its parts are made in Node.start")
    return part


def _dialect(db_url: str) -> str | None:
    """The store's dialect (sqlite, postgresql, mysql) from its URL, before any connection is made."""
    try:
        return normalise_url(db_url).get_backend_name()
    except Exception:  # noqa: BLE001 - a bad URL is reported by make_engine, with its own message
        return None
