"""Retention on a real node (real etcd, real SQLite) at 200 jobs/s: ticks older than the horizon go, newer ones
stay, the audit says "pruned", and the lateness of starts before and while pruning runs is printed.

Lateness is read from the ticks themselves (start minus slot) a moment after each slot, before retention
deletes them. The first RETENTION_S of slots start while nothing is old enough to prune ("without"); the
slots from RETENTION_S + 2 s on start while the leader deletes a second's worth of ticks every second ("with").
Only behaviour is asserted; the figures are printed (docs/performance.md, "Retention").
"""

from __future__ import annotations

import json
import threading
import uuid

import grpc
import pytest
from sqlalchemy import func, select

from shardcron import Client, clock
from shardcron.audit import run_audit
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.rules.retention import PruneState
from shardcron.spec.job import job_from_dict
from shardcron.store import make_engine
from shardcron.store.engine import reading
from shardcron.store.retention import shard_horizons_by_shard
from shardcron.store.schema import job_horizons, ticks
from shardcron.store.tick_reads import list_ticks
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.integration.node.test_jitter_and_runs import cli

pytestmark = pytest.mark.cluster

JOBS = 200
RETENTION_S = 10
RUN_S = 26


def p99(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class LatenessReader:
    """Reads each finished tick's start minus slot once, a moment after its slot (before it can be pruned)."""

    def __init__(self, engine):
        self.engine = engine
        self.late: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            since = clock.wall_ms() - 5_000
            q = select(ticks.c.job_id, ticks.c.scheduled_at_ms, ticks.c.started_at_ms).where(
                ticks.c.scheduled_at_ms > since, ticks.c.started_at_ms.is_not(None)
            )
            with reading(self.engine) as conn:
                for job_id, at, started in conn.execute(q):
                    self.late.setdefault((job_id, at), started - at)

    def between(self, from_ms: int, to_ms: int) -> list[int]:
        return [late for (_, at), late in self.late.items() if from_ms <= at < to_ms]


def refuses_a_bad_history_limit(node) -> None:
    """INVALID_ARGUMENT naming history_limit from the API; one line naming it from the CLI."""
    with grpc.insecure_channel(node.address) as ch:
        job = pb.Job(id="bad-limit", schedule=pb.Schedule(interval_ms=60_000), noop=pb.NoopExecutor(), history_limit=0)
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.SchedulerStub(ch).PutJob(pb.PutJobRequest(job=job), timeout=10)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "history_limit" in e.value.details()
    out = cli(node, "jobs", "put", "bad-limit", "--every", "1m", "--noop", "--history-limit", "-2")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "--history-limit" in lines[0], out.stderr


def test_retention_at_200_jobs_a_second(etcd_server, fresh_db_url, tmp_path, capsys):
    url = fresh_db_url("sqlite")
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", 4, 4, str(tmp_path))
    node = c.add("solo", extra_args=["--tick-retention", f"{RETENTION_S}s"])
    engine = make_engine(url)
    reader = None
    try:
        c.wait_all_led(60)
        jobs = [job_from_dict({"id": f"r{i:03d}", "every": "1s", "catchup_window": "5s"}) for i in range(JOBS)]
        with Client(node.address) as client:
            assert all(r.ok for r in client.put_jobs(jobs))
        refuses_a_bad_history_limit(node)
        assert (
            json.loads(
                cli(
                    node,
                    "jobs",
                    "put",
                    "kept3",
                    "--every",
                    "1s",
                    "--catchup-window",
                    "5s",
                    "--noop",
                    "--history-limit",
                    "3",
                    "--json",
                ).stdout
            )["history_limit"]
            == 3
        )
        reader = LatenessReader(engine)
        first = (clock.wall_ms() // 1000 + 2) * 1000  # the first whole second every job surely owes
        wait_until(lambda: clock.wall_ms() > first + RUN_S * 1000, RUN_S + 30, 0.5, what="the run")

        # Ticks older than the horizon are gone (the leader prunes every second: allow it a few passes).
        def old_rows() -> int:
            with reading(engine) as conn:
                return conn.execute(
                    select(func.count()).where(ticks.c.scheduled_at_ms < clock.wall_ms() - (RETENTION_S + 5) * 1000)
                ).scalar()

        wait_until(lambda: old_rows() == 0, 60, 0.5, what="ticks older than the retention to be pruned")

        # history_limit 3: its leader prunes it (every 10 s) and records the job's own horizon.
        def kept3_horizon() -> int | None:
            with reading(engine) as conn:
                return conn.execute(select(job_horizons.c.horizon_ms).where(job_horizons.c.job_id == "kept3")).scalar()

        wait_until(kept3_horizon, 30, 0.5, what="kept3's history to be pruned")
        assert len(list_ticks(engine, "kept3")) <= 3 + 10 + 2  # its newest 3, and what came since the last turn
        reader.stop.set()
        c.stop_all()

        horizons = shard_horizons_by_shard(engine)
        assert sorted(horizons) == [0, 1, 2, 3], horizons
        lowest, highest = min(horizons.values()), max(horizons.values())
        assert first + 5_000 < lowest, "every shard pruned past the first seconds"
        # The audit over the whole run says pruned, never missing; above every horizon each slot is there.
        end = (clock.wall_ms() // 1000 - 3) * 1000
        whole = run_audit(engine, from_ms=first - 1, to_ms=end)
        assert whole.clean() and not whole.missing, whole.to_dict()["missing"][:5]
        assert whole.pruned >= JOBS * 5 and whole.retention is PruneState.PARTIALLY_PRUNED
        assert whole.per_job["kept3"].pruned >= RUN_S - 10, whole.per_job["kept3"]
        recent = run_audit(engine, from_ms=highest, to_ms=end)
        unlimited = [s for job_id, s in recent.per_job.items() if job_id != "kept3"]
        assert recent.clean() and len(unlimited) == JOBS
        assert all(s.pruned == 0 and s.slots_checked == s.ticks >= 5 for s in unlimited), unlimited[:3]
    finally:
        if reader is not None:
            reader.stop.set()
        c.stop_all()
        engine.dispose()
    assert "Traceback" not in node.log_text(), node.log_text()[-6000:]

    without = reader.between(first, first + RETENTION_S * 1000)
    with_pruning = reader.between(first + (RETENTION_S + 2) * 1000, first + RUN_S * 1000)
    assert len(without) >= JOBS * (RETENTION_S - 2) and len(with_pruning) >= JOBS * (RUN_S - RETENTION_S - 4)
    with capsys.disabled():
        print(
            f"\nretention {RETENTION_S}s, {JOBS} jobs/s, SQLite: lateness p99 without pruning {p99(without)} ms "
            f"({len(without)} ticks, max {max(without)} ms), while pruning {p99(with_pruning)} ms "
            f"({len(with_pruning)} ticks, max {max(with_pruning)} ms); {whole.pruned} slots pruned in the audit"
        )
