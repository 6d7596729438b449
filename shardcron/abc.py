"""The interfaces between shardcron's parts, in one place (as APScheduler 4's ``abc.py``).

- ``Trigger``: when a job's slots fall (``rules/triggers.py`` implements it);
- ``Executor``: runs one attempt of one tick (``executors/``, one file per kind);
- ``Cancel``: what an executor is given to know it must stop, and to wait on;
- ``Lease``: what the scheduling side asks of the coordinator's session before it acts;
- ``ShardWork``: what the coordinator needs from the scheduling side (``leader/loop.py``);
- ``Backend``: what the API layer needs from a running node (``node.py``).

Each side speaks only to the protocol, so the parts can be tested and reasoned
about without each other's internals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import re

    from sqlalchemy.engine import Engine

    from shardcron.coordination.calendar_book import CalendarBook
    from shardcron.coordination.etcd import Etcd
    from shardcron.coordination.keys import KeyLayout
    from shardcron.model import ExecutionResult, ExecutorSpec, Job, SlotRef, Tick, TickContext
    from shardcron.runtime.latch import Latch
    from shardcron.runtime.lifeline import Lifeline
    from shardcron.spec.calendar import Calendar


class Trigger(Protocol):
    def next_after(self, after_ms: int) -> int | None:
        """The first slot strictly after ``after_ms``; ``None`` when there are no more."""
        ...


class Cancel(Protocol):
    """Set once work must stop: the node lost the shard or the lease, or is stopping.

    ``runtime.latch.Latch`` implements it, and so does a shard's
    ``leader.shard_cancel.StopOrLeaseLost``. A waiter blocks in ``wait`` or
    registers ``on_set`` and takes the registration back when it is done; it
    never looks at ``is_set`` on a timer. ``is_set`` is the point check right
    before a start, and may say True before the event is set (a lease whose
    deadline has passed on the clock before its session's thread has run).
    """

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def on_set(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` once when set (at once if already); returns what takes it back."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs one attempt of one tick, from a worker thread.

    It never raises for a job failure: connection refused, a DNS error, a
    timeout, a non-zero exit, a non-2xx answer all come back as
    ``ExecutionResult(ok=False, error=...)``. When ``cancel`` is set (the node
    lost the shard, or is stopping) it stops as soon as it can and reports an
    error that starts with ``"cancelled: "``.
    """

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult: ...


class Lease(Protocol):
    """A lease held on the coordinator's side (``coordination.session.Session`` implements it)."""

    @property
    def done(self) -> Latch:
        """Set once, when the lease is lost: at its deadline on the monotonic clock, or when etcd says so."""
        ...

    def can_act(self) -> bool:
        """True while the lease is provably still held, with a safety margin, on the monotonic clock."""
        ...


class ShardWork(Protocol):
    """What the coordinator needs from the scheduling side."""

    def acquire(self, shard: int, fence: int, stop: Latch, session: Lease) -> None:
        """Raise the fence in the store and start running the shard's jobs. Raises FencedOut when stale.

        ``stop`` is set when work on the shard must stop; the ownership state machine sets it."""

    def release(self, shard: int, grace_s: float, on_done: Callable[[], None]) -> None:
        """Stop claiming, wait up to ``grace_s`` for running ticks, then call ``on_done`` (from any thread)."""

    def job_count(self, shard: int) -> int: ...

    def set_shard_count(self, shard_count: int) -> None:
        """The cluster was resharded: jobs now map to ``shard_count`` shards."""


class Backend(Protocol):
    """What the API layer needs from a running node. ``node.py`` implements it."""

    node_id: str
    allow_shell: bool
    shell_allow: re.Pattern[str] | None  # a shell command must fully match it, when set
    allow_python: tuple[str, ...]  # module prefixes python jobs may call (--allow-python)
    engine: Engine
    joined: threading.Event  # set while the node is a live member of the cluster (health: SERVING)
    etcd: Etcd  # the forwarding secret and the tokens' bump key (api/peers.py)
    layout: KeyLayout  # where those keys are
    lifeline: Lifeline  # the API's long-lived threads and tasks report their death to it
    calendars: CalendarBook  # the calendars this node schedules by

    @property
    def shard_count(self) -> int: ...

    @property
    def min_interval_ms(self) -> int:
        """The cluster's minimum gap between a job's slots, read live (`shardcron config`)."""
        ...

    def fence_if_leader(self, shard: int) -> int | None:
        """This node's fence for ``shard`` if it leads it right now, else None."""

    def leader_address(self, shard: int) -> str | None:
        """The advertised gRPC address of the shard's current leader (from the election key), if any."""

    def job_written(self, shard: int, job: Job) -> None:
        """Tell the scheduler a job of a led shard was created, replaced, paused or resumed."""

    def job_deleted(self, shard: int, job_id: str) -> None: ...

    def trigger_now(self, shard: int, job_id: str) -> SlotRef:
        """Claim and start an extra, manual tick now (on the shard's leader). KeyError if the job is unknown."""

    def calendar_written(self, name: str, calendar: Calendar | None, now_ms: int) -> None:
        """This node wrote calendar ``name`` (``calendar`` None: deleted): every node must reload it."""

    def namespace_written(self, name: str, now_ms: int) -> None:
        """This node created, changed or deleted namespace ``name``: every node must reload the namespaces."""

    def backfill_added(self, shard: int) -> None:
        """A backfill of a led shard was stored: have the scheduler run it."""

    def shard_map(self) -> dict:
        """The same map ``shardcron shards --json`` prints (shards, nodes, shard_count)."""

    def subscribe_ticks(self, callback: Callable[[list[Tick]], None]) -> Callable[[], None]:
        """Call ``callback`` with the tick results this node writes, a batch at a time; returns an unsubscribe
        function. Subscribe only while someone wants them: with no subscriber no event is built."""
