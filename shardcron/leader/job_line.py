"""Each job's line on one led shard: which of its slots have started, which wait, in slot order.

Overlap is about runs that have *started*: a slot is skipped for overlap only
while an earlier run of its job has been handed to its executor and has not
finished. A slot that is claimed and due but not started (a catch-up slot
waiting its turn, a start waiting for an executor slot, one on its way to the
executors' loop) makes a later slot of the job wait behind it, never skip: the
later slot is judged when its turn comes (``policies.overlap_verdict``).

States of one slot of a job, on one leadership of its shard:

    DUE        taken off the dispatch heap; ``Scheduler._start`` asks the verdict
    WAITING    parked in the job's line (``parked``), in slot order
    ADMITTING  past its verdict, not started: waiting for an executor slot
               (``exec_gate``), handed to the loop, or being marked running;
               or put back on the heap after the store failed its mark
    GOING      handed to its executor (``on_slot_started``), until its coroutine
               ends; a retry's backoff is part of it: the slot has started and
               has not finished
    settled    recorded (skipped, or a noop completed), dropped (not started:
               the shard moved, the lease is in doubt, the runner's guard
               refused), or ended: it leaves the line

Transitions (the job's line counts ``unstarted`` = WAITING + ADMITTING and ``going``):

    DUE -> WAITING         verdict WAIT: an earlier slot is unstarted, or (catch-up) a run goes
    DUE -> ADMITTING       verdict START, with an executor: into the gate, or handed to the loop
    DUE -> settled         verdict SKIP (recorded), a noop completed inline, the job was deleted
                           or a calendar excludes the slot (recorded skipped)
    WAITING -> DUE         the line moved (a slot of the job started, ended or settled): the head
                           of ``parked`` goes back on the dispatch heap, due at once
    ADMITTING -> DUE       it got its executor slot (judged again, holding it), or the store
                           failed its mark and it came due again
    ADMITTING -> GOING     its runner handed it to its executor (first attempt)
    ADMITTING -> settled   not started: dropped
    GOING -> settled       its coroutine ended (every attempt done, or cancelled)
    GOING -> ADMITTING     the store failed the mark of a later attempt: put back on the heap
    any -> gone            the leadership ended: the line goes with its ``ShardRun`` and the rows
                           stay claimed or running for the next leader, as before

Every change goes through this class, under the shard's ``ShardRun.lock``; each
that can let a waiting slot go returns the parked head for the caller to push on
the dispatch heap (it does no I/O and reads no clock). A job with nothing
unstarted, going or parked has no line: the hot path's check is one dict lookup.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass, field

from shardcron.rules.takeover import Dispatch


@dataclass
class JobLine:
    going: int = 0  # runs handed to their executor and not finished
    unstarted: set[int] = field(default_factory=set)  # slots (ms) past their first verdict, not started
    parked: list[Dispatch] = field(default_factory=list)  # the WAITING ones, in slot order

    def unstarted_before(self, slot_ms: int) -> bool:
        return any(s < slot_ms for s in self.unstarted)

    @property
    def empty(self) -> bool:
        return not (self.going or self.unstarted or self.parked)


def _slot_of(d: Dispatch) -> int:
    return d.slot.scheduled_at_ms


class JobLines:
    """The lines of one led shard's jobs, by job id. Called with the shard's lock held."""

    def __init__(self) -> None:
        self._lines: dict[str, JobLine] = {}

    def get(self, job_id: str) -> JobLine | None:
        return self._lines.get(job_id)

    def going(self, job_id: str) -> int:
        line = self._lines.get(job_id)
        return line.going if line is not None else 0

    def park(self, d: Dispatch) -> None:
        """DUE -> WAITING."""
        line = self._line(d.slot.job_id)
        line.unstarted.add(d.slot.scheduled_at_ms)
        insort(line.parked, d, key=_slot_of)

    def admitting(self, job_id: str, slot_ms: int) -> None:
        """DUE -> ADMITTING (or GOING -> ADMITTING, put back after a failed mark)."""
        self._line(job_id).unstarted.add(slot_ms)

    def started(self, job_id: str, slot_ms: int) -> Dispatch | None:
        """ADMITTING -> GOING."""
        line = self._line(job_id)
        line.unstarted.discard(slot_ms)
        line.going += 1
        return self._moved(job_id, line)

    def ended(self, job_id: str) -> Dispatch | None:
        """GOING -> settled."""
        line = self._lines.get(job_id)
        if line is None or not line.going:
            raise ValueError(f"job {job_id}: a run ended that was not going")
        line.going -= 1
        return self._moved(job_id, line)

    def settled(self, job_id: str, slot_ms: int) -> Dispatch | None:
        """DUE/ADMITTING -> settled without starting: recorded or dropped."""
        line = self._lines.get(job_id)
        if line is None:
            return None  # it never queued (the usual case): nothing waits on it
        line.unstarted.discard(slot_ms)
        return self._moved(job_id, line)

    def drop_parked(self) -> int:
        """The leadership ends: how many WAITING slots it leaves (their rows stay claimed)."""
        n = sum(len(line.parked) for line in self._lines.values())
        for line in self._lines.values():
            line.parked.clear()
        return n

    def parked_count(self) -> int:
        return sum(len(line.parked) for line in self._lines.values())

    def _line(self, job_id: str) -> JobLine:
        line = self._lines.get(job_id)
        if line is None:
            line = self._lines[job_id] = JobLine()
        return line

    def _moved(self, job_id: str, line: JobLine) -> Dispatch | None:
        """WAITING -> DUE for the parked head (it stays unstarted until it starts or settles)."""
        if line.parked:
            return line.parked.pop(0)
        if line.empty:
            del self._lines[job_id]  # a deleted job leaves nothing behind
        return None


__all__ = ["JobLine", "JobLines"]
