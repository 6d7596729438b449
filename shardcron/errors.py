"""Every error shardcron raises on purpose, each with its own name.

The CLI turns any ``ShardcronError`` into a one-line message and a non-zero
exit; anything else is a bug.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardcron.jobkey import DEFAULT_NAMESPACE, split_key

if TYPE_CHECKING:
    from shardcron.rules.quotas import QuotaExceeded


class ShardcronError(Exception):
    """Base class: an expected failure with a message fit for a user.

    Every subclass pickles as itself, whatever its constructor takes, so an error
    raised in a worker process (a Celery pool, arq's stored results, multiprocessing)
    reaches the other side under its own name, with its attributes.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls ``type(self)(*self.args)``, and ``args`` holds the
        # message, not what a subclass's constructor takes (a field and a reason, a
        # shard and a fence): that call fails, and Celery then reports the nearest
        # base class that pickles instead. Rebuild without the constructor.
        return (rebuilt_error, (type(self), self.args), self.__dict__)


def rebuilt_error(cls: type[ShardcronError], args: tuple[Any, ...]) -> ShardcronError:
    """``cls`` with ``args``, made without its constructor: what unpickling a ``ShardcronError`` calls."""
    error = cls.__new__(cls)
    error.args = args
    return error


class InvalidJob(ShardcronError):
    """A job definition is malformed. ``field`` names the offending field."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class ConfigError(ShardcronError):
    """A node setting is wrong or disagrees with the cluster's configuration."""


class EtcdUnavailable(ShardcronError):
    """etcd did not answer at the configured endpoints."""


class StoreUnavailable(ShardcronError):
    """The SQL store did not answer or failed a statement for a transient reason."""


class FencedOut(ShardcronError):
    """A write carried a fence older than the shard's current one and was rejected.

    The writer is a stale leader: it must stop working on the shard.
    """

    def __init__(self, shard: int, fence: int, current: int | None):
        super().__init__(f"shard {shard}: write under fence {fence} rejected (current fence {current})")
        self.shard = shard
        self.fence = fence
        self.current = current


class SessionLost(ShardcronError):
    """The node's etcd lease expired or could not be renewed."""


class NotLeader(ShardcronError):
    """This node does not lead the shard the request concerns."""

    def __init__(self, shard: int):
        super().__init__(f"this node does not lead shard {shard}")
        self.shard = shard


def job_named(key: str) -> str:
    """``job 'id'``, and ``in namespace 'ns'`` for a job outside default: a job's key (tenancy.keys) for a message."""
    namespace, id_ = split_key(key)
    return f"job {id_!r}" if namespace == DEFAULT_NAMESPACE else f"job {id_!r} in namespace {namespace!r}"


class JobNotFound(ShardcronError):
    def __init__(self, job_id: str):
        super().__init__(f"{job_named(job_id)} not found")
        self.job_id = job_id


class TickNotFound(ShardcronError):
    """No tick for the slot asked for (not claimed yet, pruned, or no slot of the job at all)."""

    def __init__(self, job_id: str, scheduled_at_ms: int | None):
        slot = "at or before now" if scheduled_at_ms is None else f"at {scheduled_at_ms} ms"
        super().__init__(f"{job_named(job_id)} has no tick of a slot {slot}")
        self.job_id = job_id


class VersionConflict(ShardcronError):
    def __init__(self, job_id: str, expected: int, actual: int):
        super().__init__(f"{job_named(job_id)}: expected version {expected}, found {actual}")
        self.job_id = job_id
        self.expected = expected
        self.actual = actual


class JobRunning(ShardcronError):
    """A manual run of a job with overlap = "skip" while a run of it is in progress."""

    def __init__(self, job_id: str):
        super().__init__(
            f'job {job_id!r} is running now and its overlap policy is "skip": trigger it again '
            'when the run ends (or set overlap = "allow")'
        )
        self.job_id = job_id


class TriggerBusy(ShardcronError):
    """Every millisecond near now already holds a tick of the job: too many manual runs at once."""

    def __init__(self, job_id: str, at_ms: int):
        super().__init__(
            f"job {job_id!r}: no free millisecond for a manual tick near {at_ms}; too many triggers at once, retry"
        )
        self.job_id = job_id


class QuotaRefused(ShardcronError):
    """A put that would cross one of its namespace's quotas (RESOURCE_EXHAUSTED).

    ``exceeded`` is the ``rules.quotas.QuotaExceeded`` saying which quota, its limit and the
    would-be value; the message is its ``reason``."""

    def __init__(self, exceeded: QuotaExceeded) -> None:
        super().__init__(exceeded.reason)
        self.exceeded = exceeded


class NamespaceNotFound(ShardcronError):
    """A namespace RPC named a namespace that does not exist (NOT_FOUND)."""

    def __init__(self, name: str):
        super().__init__(f"namespace {name!r} not found; `shardcron namespaces list` shows the namespaces")
        self.name = name


class NamespaceMissing(ShardcronError):
    """A job put into a namespace that was never created (FAILED_PRECONDITION): namespaces are made on
    purpose, so a typo in a job file cannot start a namespace of its own, without quotas."""

    def __init__(self, name: str):
        super().__init__(
            f"namespace {name!r} does not exist: create it first with `shardcron namespaces create {name}`"
        )
        self.name = name


class NamespaceExists(ShardcronError):
    """CreateNamespace of a name that is taken (ALREADY_EXISTS)."""

    def __init__(self, name: str):
        super().__init__(f"namespace {name!r} already exists; `shardcron namespaces update {name}` changes it")
        self.name = name
