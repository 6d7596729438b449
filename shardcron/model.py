"""shardcron's own small domain types. Protobuf and gRPC types stop at ``api/``.

Times are integers of milliseconds since the Unix epoch (UTC) everywhere inside
the package and in the store: they compare exactly, index well on every
database, and carry no timezone ambiguity. Timezones only matter to triggers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from shardcron.jobkey import JobKey, slot_idempotency_key, split_key


class ScheduleKind(StrEnum):
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"


class CatchUp(StrEnum):
    """What to do with slots that passed while no leader could run them."""

    ALL = "all"  # run every missed slot inside the catch-up window
    LATEST = "latest"  # run only the most recent missed slot, record the rest as skipped
    NONE = "none"  # record every missed slot as skipped, carry on from the next one


class Overlap(StrEnum):
    """What to do when a slot comes due while the job's previous run is still going."""

    SKIP = "skip"
    ALLOW = "allow"


class ExecutorKind(StrEnum):
    HTTP = "http"
    SHELL = "shell"
    NOOP = "noop"
    # Dispatch to where the work runs: one enqueue or publish per slot, acked by the broker.
    CELERY = "celery"
    RQ = "rq"
    ARQ = "arq"
    NATS = "nats"
    AMQP = "amqp"
    REDIS_STREAM = "redis-stream"
    PYTHON = "python"


class TickStatus(StrEnum):
    """A tick row's status. Every slot of every job ends in one of the final ones.

    claimed -> running -> succeeded | failed
    claimed -> skipped            (overlap policy, catch-up policy)
    claimed | running -> abandoned (leader died mid-run and the retry budget is spent)
    running -> running            (next attempt after a failure, attempt + 1)
    """

    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    ABANDONED = "abandoned"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({TickStatus.SUCCEEDED, TickStatus.FAILED, TickStatus.SKIPPED, TickStatus.ABANDONED})


@dataclass(frozen=True)
class Schedule:
    kind: ScheduleKind
    cron: str | None = None  # 5 fields, or 6 with seconds first
    interval_ms: int | None = None  # slots at whole multiples of the interval since the epoch
    at_ms: int | None = None  # the single slot of a ONCE job
    timezone: str = "UTC"  # IANA name; cron fields are read in this zone


@dataclass(frozen=True)
class HttpSpec:
    url: str
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()
    body: str = ""
    # Header names whose values are never logged nor returned by the API.
    secret_headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShellSpec:
    command: str


# -- dispatch executors ---------------------------------------------------------------
# ``url`` is the broker's URL (redis://, rediss://, amqp://, amqps://, nats://, tls://);
# a password in it is never logged nor returned by the API (``executors/describe.py``).
# ``args`` and ``kwargs`` are JSON values, passed to the task as they are.


@dataclass(frozen=True)
class CelerySpec:
    url: str
    task: str  # the registered task name, e.g. "app.tasks.send_report"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    routing_key: str | None = None
    priority: int | None = None  # 0-9 (Redis) or 0-255 (RabbitMQ)
    expires_ms: int | None = None  # relative to the slot: a worker drops the task after it


@dataclass(frozen=True)
class RqSpec:
    url: str
    func: str  # the dotted path a worker imports, e.g. "app.tasks.send_report"
    queue: str = "default"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ArqSpec:
    url: str
    function: str  # the name in the worker's ``functions``
    queue: str = "arq:queue"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # When set, the tick (``executors.identity.tick_fields``) is passed as this keyword argument.
    tick_kwarg: str | None = None


@dataclass(frozen=True)
class NatsSpec:
    url: str
    subject: str
    jetstream: bool = True  # publish to a stream with Nats-Msg-Id, wait for its ack
    body: str = ""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AmqpSpec:
    url: str
    routing_key: str
    exchange: str = ""  # "": the default exchange, routing_key names the queue
    body: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    persistent: bool = True
    content_type: str = "application/json"


@dataclass(frozen=True)
class RedisStreamSpec:
    url: str
    stream: str
    fields: tuple[tuple[str, str], ...] = ()
    maxlen: int | None = None  # approximate trim (XADD MAXLEN ~)
    # How long a slot's dedupe marker lives; at least the job's catch-up window plus an hour.
    dedupe_ttl_ms: int | None = None


@dataclass(frozen=True)
class PythonSpec:
    target: str  # "package.module:function", refused unless a node's --allow-python covers the module
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Pass a SQLAlchemy session whose writes commit in the tick's fenced result transaction.
    session: bool = False


@dataclass(frozen=True)
class ExecutorSpec:
    kind: ExecutorKind
    http: HttpSpec | None = None
    shell: ShellSpec | None = None
    celery: CelerySpec | None = None
    rq: RqSpec | None = None
    arq: ArqSpec | None = None
    nats: NatsSpec | None = None
    amqp: AmqpSpec | None = None
    redis_stream: RedisStreamSpec | None = None
    python: PythonSpec | None = None

    @property
    def settings(self):
        """The settings of this kind (``HttpSpec``, ``CelerySpec``, ...); None for noop."""
        return getattr(self, _SETTINGS_FIELD[self.kind], None) if self.kind in _SETTINGS_FIELD else None


_SETTINGS_FIELD = {
    ExecutorKind.HTTP: "http",
    ExecutorKind.SHELL: "shell",
    ExecutorKind.CELERY: "celery",
    ExecutorKind.RQ: "rq",
    ExecutorKind.ARQ: "arq",
    ExecutorKind.NATS: "nats",
    ExecutorKind.AMQP: "amqp",
    ExecutorKind.REDIS_STREAM: "redis_stream",
    ExecutorKind.PYTHON: "python",
}


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 1  # 1 means no retry
    backoff_initial_ms: int = 1000
    backoff_max_ms: int = 60_000


@dataclass(frozen=True)
class Job:
    id: str  # the job's key: the id itself in namespace default, else namespace U+001F id (tenancy.keys)
    schedule: Schedule
    executor: ExecutorSpec
    catchup: CatchUp = CatchUp.ALL
    catchup_window_ms: int = 3_600_000
    overlap: Overlap = Overlap.SKIP
    timeout_ms: int = 60_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Each slot starts jitter.jitter_offset_ms(id, slot, jitter_ms) after it, in [0, jitter_ms);
    # the slot (the tick row's identity) stays the unjittered time. 0: start at the slot.
    jitter_ms: int = 0
    # Names of stored calendars (spec/calendar.py): a slot any of them excludes is not owed.
    calendars: tuple[str, ...] = ()
    # Keep at most this many of the job's newest ticks (retention); None: keep every tick.
    history_limit: int | None = None
    # Run once per failed slot (after its retries) and once per recovery (rules/notifications.py);
    # None: the node's default, if it has one (--notify-on-failure / --notify-on-recovery).
    on_failure: ExecutorSpec | None = None
    on_recovery: ExecutorSpec | None = None
    # Deadlines, from the slot's scheduled time (rules/deadlines.py); None: none of that kind.
    start_deadline_ms: int | None = None  # the tick must start within it
    deadline_ms: int | None = None  # the slot must succeed (and be acked, with a heartbeat) within it
    heartbeat_ms: int | None = None  # the slot must be acked (``jobs ack``) within it
    # Run once per missed deadline; None: on_failure's target (the job's own, else the node's default).
    on_deadline: ExecutorSpec | None = None
    paused: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    version: int = 0  # store-assigned; 0 for a job never written
    # Store-assigned: when the current definition (or the last resume) took effect.
    # Slots at or before it are never owed, so a new or resumed job has no backlog.
    active_since_ms: int = 0

    @property
    def key(self) -> JobKey:
        """``(namespace, id)``, from ``id``."""
        return split_key(self.id)


@dataclass(frozen=True)
class JobRuns:
    """What GetJob and ListJobs say about a job's runs, as of ``as_of_ms`` (see rules/runs.py).

    ``next_slot_ms``: the next owed slot (None when paused or the schedule has ended), which
    starts at ``next_start_ms`` (the slot plus its jitter offset). ``last_*``: the newest tick
    scheduled at or before ``as_of_ms`` that started or was settled (not merely claimed), manual
    runs included (None: no such tick yet).
    ``failures_in_a_row``: failed or abandoned ticks since the last succeeded one.
    ``last_missed_deadlines``: the kinds of deadline the last tick missed (rules/deadlines.py); a job
    whose last tick missed one is past a deadline.
    """

    as_of_ms: int
    next_slot_ms: int | None = None
    next_start_ms: int | None = None
    last_scheduled_at_ms: int | None = None
    last_status: TickStatus | None = None
    failures_in_a_row: int = 0
    next_reason: str | None = None  # why the next slot is not sooner: the calendar that excluded what
    last_missed_deadlines: tuple[str, ...] = ()


class SlotRef(NamedTuple):
    """A tick's identity: one per job and scheduled time.

    A named tuple, not a dataclass: several are made, hashed and compared per
    tick on the hot path, and a tuple does all three in C (a frozen
    dataclass's ``__init__`` and ``__hash__`` are Python).
    """

    job_id: str
    scheduled_at_ms: int


class RecordedMiss(NamedTuple):
    """A deadline a slot missed, as recorded (ListDeadlineMisses): ``kind`` is start_deadline, deadline or heartbeat."""

    job_id: str  # the job's key
    scheduled_at_ms: int
    kind: str
    missed_at_ms: int


class Acked(NamedTuple):
    """What an ack of a slot's work recorded (AckTick): the slot, its first ack, whether it came before."""

    slot: SlotRef
    acked_at_ms: int
    already: bool


@dataclass(frozen=True)
class Tick:
    job_id: str
    scheduled_at_ms: int
    shard: int
    fence: int
    node_id: str
    status: TickStatus
    attempt: int = 0
    manual: bool = False  # an extra run asked for with TriggerJob
    claimed_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    exit_code: int | None = None
    http_status: int | None = None
    output: str | None = None
    error: str | None = None
    acked_at_ms: int | None = None  # when the slot's work was reported done (AckTick)
    missed_deadlines: tuple[str, ...] = ()  # the kinds of deadline it missed (rules/deadlines.py)

    @property
    def slot(self) -> SlotRef:
        return SlotRef(self.job_id, self.scheduled_at_ms)


OUTPUT_LIMIT_BYTES = 64 * 1024


class ExecutionResult(NamedTuple):
    """What an executor reports about one attempt. (A named tuple: one is made per tick, and a tuple is
    built in C, where a frozen dataclass's ``__init__`` sets each field through Python.)"""

    ok: bool
    started_at_ms: int
    finished_at_ms: int
    exit_code: int | None = None
    http_status: int | None = None
    output: str = ""  # truncated to OUTPUT_LIMIT_BYTES by the executor
    error: str | None = None

    @property
    def duration_ms(self) -> int:
        return self.finished_at_ms - self.started_at_ms


@dataclass(frozen=True)
class TickContext:
    """What an executor is told about the tick it runs, and passes downstream."""

    job_id: str  # the job's key: its namespace and id (tenancy.keys)
    scheduled_at_ms: int
    attempt: int
    fence: int
    shard: int
    node_id: str
    # The attempt's span's W3C trace context (``traceparent``, ``tracestate``) when tracing is on: sent on
    # under those names (``executors.identity``). Empty with tracing off.
    trace: tuple[tuple[str, str], ...] = ()

    @property
    def idempotency_key(self) -> str:
        return slot_idempotency_key(self.job_id, self.scheduled_at_ms)


class BackfillState(StrEnum):
    ACTIVE = "active"  # its shard's leader runs it
    DONE = "done"  # every slot of its range was handled
    FAILED = "failed"  # stopped for good: ``error`` says why (the job was deleted)


@dataclass(frozen=True)
class Backfill:
    """One ``shardcron jobs backfill`` request and how far it got (``store.backfills``)."""

    id: str
    job_id: str
    shard: int
    from_ms: int  # inclusive
    to_ms: int  # exclusive
    overlap: Overlap
    rate_per_s: float
    planned: int  # owed slots (no tick yet) when it was created
    created_at_ms: int
    state: BackfillState = BackfillState.ACTIVE
    cursor_ms: int | None = None  # the last slot handled; None: none yet
    done: int = 0  # ticks it wrote (run, or recorded skipped by --overlap skip)
    skipped: int = 0  # of those, recorded skipped: a run of the job was going
    fence: int = 0
    node_id: str = ""
    updated_at_ms: int = 0
    error: str | None = None
