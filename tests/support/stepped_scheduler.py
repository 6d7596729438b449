"""A Scheduler stepped through time by an injected clock, over a real SQLite store: the rig of the
scheduler tests in tests/integration/leader (their fixtures are in that folder's conftest.py)."""

from __future__ import annotations

import threading

from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import wait_until
from shardcron.leader.loop import Scheduler
from shardcron.model import Job, TickStatus
from shardcron.runtime.latch import Latch
from shardcron.store import list_ticks, put_job, raise_fence

S = 1000
T0 = 1_700_000_000_000  # a whole second; nothing here reads the real wall clock for slots
FENCE = 7
NODE = "n1"


class SteppedClock:
    """Wall time that moves only when the test says so: by setting ``now_ms``, or ``step_ms`` per read."""

    def __init__(self, now_ms: int):
        self.now_ms = now_ms
        self.step_ms = 0

    def wall_ms(self) -> int:
        now = self.now_ms
        self.now_ms += self.step_ms
        return now


class LeaseOnClock:
    """A session reduced to what the scheduler reads: ``done``, and a lease valid until a deadline."""

    def __init__(self, clock: SteppedClock, valid_until_ms: int):
        self.done = Latch()
        self.clock = clock
        self.valid_until_ms = valid_until_ms

    def can_act(self) -> bool:
        return not self.done.is_set() and self.clock.now_ms < self.valid_until_ms


class HeldSink:
    """The dev sink, each request held open until ``let_go``."""

    def __init__(self):
        self.gate = threading.Event()
        self.sink = Sink(on_request=lambda r: self.gate.wait(30))
        self.sink.start()

    def calls(self, job_id: str) -> list[int]:
        """The slots the sink has been called for, of ``job_id``."""
        keys = [r.header("idempotency-key") or "" for r in self.sink.requests()]
        return sorted(int(k.rsplit(":", 1)[1]) for k in keys if k.startswith(f"{job_id}:"))

    def let_go(self) -> None:
        self.gate.set()

    def hold(self) -> None:
        self.gate.clear()


class Rig:
    """One scheduler leading shard 0 from T0, on a stepped clock."""

    def __init__(self, engine, jobs: list[Job], lease_s: float = 3600, writer_claims: bool = False, **scheduler_kw):
        self.engine = engine
        self.clock = SteppedClock(T0)
        self.session = LeaseOnClock(self.clock, T0 + int(lease_s * S))
        self.stop = Latch()
        self.jobs = {}
        raise_fence(engine, 0, FENCE, NODE, T0)  # what the scheduler's acquire does first, so the jobs go in
        for job in jobs:
            self.jobs[job.id] = put_job(engine, job, shard=0, fence=FENCE, node_id=NODE, now_ms=T0)
        self.scheduler = Scheduler(engine, NODE, 1, lookahead_ms=S, clock=self.clock, workers=4, **scheduler_kw)
        # The writer serves the marks and the results; the test steps the claims (claim_due) and prunes itself,
        # unless ``writer_claims``: then the writer claims too, when the clock is moved and it is woken.
        serving = [self.scheduler.marks, self.scheduler.recorder]
        if writer_claims:
            serving.append(self.scheduler.claim_stream)
        self.scheduler.writer.start(serving=serving)
        self.scheduler.acquire(0, FENCE, self.stop, self.session)

    def at(self, ms: int) -> None:
        """Move the clock to ``ms`` and run one claim step and one dispatch step there."""
        assert ms >= self.clock.now_ms, "the clock only moves forward"
        self.clock.now_ms = ms
        self.scheduler.claim_due()
        self.scheduler.dispatch_due()

    def put_again(self, job: Job, at_ms: int) -> Job:
        stored = put_job(self.engine, job, shard=0, fence=FENCE, node_id=NODE, now_ms=at_ms)
        self.scheduler.upsert_job(0, stored)
        return stored

    def ticks(self, job_id: str) -> dict[int, object]:
        """slot (seconds after T0) -> (status, error), once every queued result is written."""
        assert self.scheduler.recorder.flush(0, 30), "the recorder did not write its results"
        return {(t.scheduled_at_ms - T0) // S: (t.status, t.error) for t in list_ticks(self.engine, job_id)}

    def wait_status(self, job_id: str, slot_s: int, status: TickStatus) -> None:
        wait_until(
            lambda: self.ticks(job_id).get(slot_s, (None,))[0] is status,
            30,
            what=f"{job_id}@{slot_s}s to be {status.value}",
        )

    def close(self) -> None:
        self.scheduler.close()
