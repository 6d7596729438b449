"""One led shard as the scheduling loop holds it: fence, stop event, session, jobs, runs in flight.

Everything here that changes after the shard is acquired (``jobs``,
``running``, ``in_flight``, ``released``) is read and changed only with
``lock`` held: the API's threads replace and remove jobs, the dispatcher
starts runs and the workers end them.

Why the in-flight count lives here, keyed by job id, and not on the job's
entry: an entry is replaced whenever the job is put again (a label, a new
URL) or paused and resumed, and removed when the job is deleted, while a run
of it may still be going. The run belongs to the job on this shard, so the
worker that ends it decrements the job's count, which the next entry of the
same job reads. Counting on the entry let a run started by the old entry end
on the old entry, and the new one believed forever that a run was going
(issue 10: every later slot "skipped: overlap policy").
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from shardcron.coordination.session import Session
from shardcron.model import Job
from shardcron.scheduling.runner import StopOrLeaseLost
from shardcron.scheduling.triggers import Trigger


@dataclass
class JobEntry:
    """One definition of a job, as scheduled: replaced (with a new ``gen``) when the job changes."""

    job: Job
    trigger: Trigger
    gen: int  # heap entries carry it: one of an older definition finds a newer gen and is dropped
    claimed_through: int = 0  # the latest slot claimed for it by this leadership


@dataclass
class ShardRun:
    shard: int
    fence: int
    stop: threading.Event
    session: Session
    jobs: dict[str, JobEntry] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)  # job id -> its runs in flight (absent: none)
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: bool = False
    in_flight: int = 0  # every job's runs together: what a release waits for
    idle: threading.Condition = None  # type: ignore[assignment]
    cancel: StopOrLeaseLost = None  # type: ignore[assignment]  # what this leadership's ticks are given
    _gens: itertools.count = field(default_factory=itertools.count)

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
        return self.running.get(job_id, 0)

    def run_started(self, job_id: str) -> None:
        self.running[job_id] = self.running.get(job_id, 0) + 1
        self.in_flight += 1

    def run_ended(self, job_id: str) -> None:
        left = self.running[job_id] - 1
        if left:
            self.running[job_id] = left
        else:
            del self.running[job_id]  # a deleted job leaves nothing behind
        self.in_flight -= 1
        self.idle.notify_all()
