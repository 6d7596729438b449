"""shardcron's own small domain types. Protobuf and gRPC types stop at ``api/``.

Times are integers of milliseconds since the Unix epoch (UTC) everywhere inside
the package and in the store: they compare exactly, index well on every
database, and carry no timezone ambiguity. Timezones only matter to triggers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


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


@dataclass(frozen=True)
class ExecutorSpec:
    kind: ExecutorKind
    http: HttpSpec | None = None
    shell: ShellSpec | None = None


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 1  # 1 means no retry
    backoff_initial_ms: int = 1000
    backoff_max_ms: int = 60_000


@dataclass(frozen=True)
class Job:
    id: str
    schedule: Schedule
    executor: ExecutorSpec
    catchup: CatchUp = CatchUp.ALL
    catchup_window_ms: int = 3_600_000
    overlap: Overlap = Overlap.SKIP
    timeout_ms: int = 60_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    paused: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    version: int = 0  # store-assigned; 0 for a job never written
    # Store-assigned: when the current definition (or the last resume) took effect.
    # Slots at or before it are never owed, so a new or resumed job has no backlog.
    active_since_ms: int = 0


@dataclass(frozen=True)
class SlotRef:
    """A tick's identity: one per job and scheduled time."""

    job_id: str
    scheduled_at_ms: int


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

    @property
    def slot(self) -> SlotRef:
        return SlotRef(self.job_id, self.scheduled_at_ms)


OUTPUT_LIMIT_BYTES = 64 * 1024


@dataclass(frozen=True)
class ExecutionResult:
    """What an executor reports about one attempt."""

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

    job_id: str
    scheduled_at_ms: int
    attempt: int
    fence: int
    shard: int
    node_id: str

    @property
    def idempotency_key(self) -> str:
        return f"{self.job_id}:{self.scheduled_at_ms}"
