"""One led shard as the scheduling loop holds it: fence, stop latch, session, jobs, runs in flight.

Everything here that changes after the shard is acquired (``jobs``,
``lines``, ``in_flight``, ``released``) is read and changed only with
``lock`` held: the API's threads replace and remove jobs, the dispatcher
starts runs and the workers end them.

Why each job's line (``job_line.py``: its started runs and its waiting slots)
lives here, keyed by job id, and not on the job's entry: an entry is replaced
whenever the job is put again (a label, a new URL) or paused and resumed, and
removed when the job is deleted, while a run of it may still be going. The run
belongs to the job on this shard, so the worker that ends it takes it off the
job's line, which the next entry of the same job reads. Counting on the entry
would let a run started by the old entry end on the old entry, and the new one
believe forever that a run was going (every later slot "skipped: overlap policy").
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from shardcron.abc import Lease
from shardcron.leader.job_line import JobLines
from shardcron.leader.shard_cancel import StopOrLeaseLost
from shardcron.model import Job
from shardcron.rules.deadlines import has_deadlines
from shardcron.rules.triggers import Trigger
from shardcron.runtime.latch import Latch


@dataclass
class JobEntry:
    """One definition of a job, as scheduled: replaced (with a new ``gen``) when the job changes."""

    job: Job
    trigger: Trigger
    gen: int  # heap entries carry it: one of an older definition finds a newer gen and is dropped
    claimed_through: int = 0  # the latest slot claimed for it by this leadership
    watch_deadlines: bool = False  # the job has deadlines: each claimed slot's are judged (rules/deadlines.py)

    def __post_init__(self) -> None:
        self.watch_deadlines = has_deadlines(self.job)


@dataclass
class ShardRun:
    shard: int
    fence: int
    stop: Latch  # set by the ownership state machine (or a release) when work on the shard must stop
    session: Lease
    jobs: dict[str, JobEntry] = field(default_factory=dict)
    lines: JobLines = field(default_factory=JobLines)  # each job's started runs and waiting slots
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: bool = False
    in_flight: int = 0  # ticks handed to the executors' loop and not ended: what a release waits for
    idle: threading.Condition = None  # type: ignore[assignment]
    cancel: StopOrLeaseLost = None  # type: ignore[assignment]  # what this leadership's ticks are given: stop or done
    # From 1: a dispatch with gen 0 (a takeover's re-claim, a catch-up) is of no definition, so its start is judged
    # against the job as it stands (policies.disowned_slot): a pause it missed skips it.
    _gens: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self):
        self.idle = threading.Condition(self.lock)
        self.cancel = StopOrLeaseLost(self.stop, self.session)

    @property
    def active(self) -> bool:
        return not self.released and not self.stop.is_set()

    # The methods below are called with ``lock`` held.

    def next_gen(self) -> int:
        return next(self._gens)

    def runs_of(self, job_id: str) -> int:
        """The job's runs that have started (been handed to their executor) and not finished."""
        return self.lines.going(job_id)

    def tick_handed(self) -> None:
        self.in_flight += 1

    def tick_ended(self) -> None:
        self.in_flight -= 1
        self.idle.notify_all()
