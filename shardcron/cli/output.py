"""What the jobs and ticks commands print: a job, its runs and a tick, as table rows and as JSON."""

from __future__ import annotations

from typing import Any

from shardcron.cli.common import fmt_ms, table
from shardcron.executors.describe import target
from shardcron.jobkey import split_key
from shardcron.model import Job, JobRuns, ScheduleKind, Tick
from shardcron.spec.durations import format_duration_ms
from shardcron.spec.job import job_to_dict


def describe_schedule(job: Job) -> str:
    s = job.schedule
    tz = "" if s.timezone == "UTC" else f" ({s.timezone})"
    if s.kind is ScheduleKind.CRON:
        return f"cron {s.cron}{tz}"
    if s.kind is ScheduleKind.INTERVAL:
        return f"every {format_duration_ms(s.interval_ms)}"
    return f"at {fmt_ms(s.at_ms)}"


def describe_executor(job: Job) -> str:
    ex = job.executor
    if ex.http:
        return f"http {ex.http.method} {ex.http.url}"
    if ex.shell:
        cmd = ex.shell.command
        return "shell " + (cmd if len(cmd) <= 40 else cmd[:37] + "...")
    if ex.settings is not None:
        return f"{ex.kind.value} {target(ex)}"
    return "noop"


def describe_labels(job: Job) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(job.labels.items())) or "-"


def job_json(job: Job, shard: int | None = None) -> dict[str, Any]:
    d = job_to_dict(job)
    d["namespace"] = job.key.namespace
    d["active_since_ms"] = job.active_since_ms
    if shard is not None:
        d["shard"] = shard
    return d


def runs_json(runs: JobRuns) -> dict[str, Any]:
    return {
        "as_of_ms": runs.as_of_ms,
        "next_slot_ms": runs.next_slot_ms,
        "next_start_ms": runs.next_start_ms,
        "last_scheduled_at_ms": runs.last_scheduled_at_ms,
        "last_status": runs.last_status.value if runs.last_status else None,
        "failures_in_a_row": runs.failures_in_a_row,
        "next_reason": runs.next_reason,
    }


def runs_cells(runs: JobRuns) -> list[Any]:
    """NEXT (the next owed slot's start, with the slot when jitter moves it), LAST (the newest
    tick's slot and status) and FAILS (failed or abandoned ticks since the last success)."""
    nxt = fmt_ms(runs.next_start_ms)
    if runs.next_start_ms is not None and runs.next_start_ms != runs.next_slot_ms:
        nxt += f" (slot {fmt_ms(runs.next_slot_ms)} + jitter)"
    last = (
        "-"
        if runs.last_scheduled_at_ms is None
        else f"{fmt_ms(runs.last_scheduled_at_ms)} {runs.last_status.value if runs.last_status else '?'}"
    )
    return [nxt, last, runs.failures_in_a_row]


def tick_json(t: Tick) -> dict[str, Any]:
    key = split_key(t.job_id)
    return {
        "job_id": key.id,
        "namespace": key.namespace,
        "scheduled_at_ms": t.scheduled_at_ms,
        "shard": t.shard,
        "fence": t.fence,
        "node_id": t.node_id,
        "status": t.status.value,
        "attempt": t.attempt,
        "manual": t.manual,
        "claimed_at_ms": t.claimed_at_ms,
        "started_at_ms": t.started_at_ms,
        "finished_at_ms": t.finished_at_ms,
        "exit_code": t.exit_code,
        "http_status": t.http_status,
        "output": t.output,
        "error": t.error,
        "acked_at_ms": t.acked_at_ms,
        "missed_deadlines": list(t.missed_deadlines),
    }


JOB_HEADERS = ["ID", "SHARD", "SCHEDULE", "EXECUTOR", "STATE", "VERSION", "LABELS", "NEXT", "LAST", "FAILS"]
TICK_HEADERS = ["SCHEDULED", "STATUS", "ATTEMPT", "NODE", "FENCE", "DURATION", "RESULT"]


def job_row(job: Job, shard: int | None) -> list[Any]:
    return [
        job.key.id,
        "-" if shard is None else shard,
        describe_schedule(job),
        describe_executor(job),
        "paused" if job.paused else "active",
        job.version,
        describe_labels(job),
    ]


def tick_row(t: Tick) -> list[Any]:
    took = t.finished_at_ms - t.started_at_ms if t.finished_at_ms and t.started_at_ms else None
    if t.error:
        result = t.error.splitlines()[0][:60]
    elif t.http_status is not None:
        result = f"http {t.http_status}"
    elif t.exit_code is not None:
        result = f"exit {t.exit_code}"
    elif t.output:  # a broker kind's message or task id, a Python job's return value
        result = t.output.splitlines()[0][:60]
    else:
        result = "-"
    if t.missed_deadlines:
        result = f"missed {', '.join(t.missed_deadlines)}; {result}"
    return [
        fmt_ms(t.scheduled_at_ms) + (" (manual)" if t.manual else ""),
        t.status.value,
        t.attempt,
        t.node_id,
        t.fence,
        format_duration_ms(took),
        result,
    ]


def jobs_table(listed: list[tuple[Job, JobRuns]], shards: dict[str, int | None], *, namespaced: bool = False) -> str:
    """The table ``jobs list`` and ``jobs get`` print: a row per job and its runs, its shard from ``shards``
    (by job key); ``namespaced``: a first column says whose each job is (a listing of every namespace)."""
    rows = [job_row(j, shards.get(j.id)) + runs_cells(r) for j, r in listed]
    if namespaced:
        return table(
            [[j.key.namespace] + row for (j, _), row in zip(listed, rows, strict=True)], ["NAMESPACE"] + JOB_HEADERS
        )
    return table(rows, JOB_HEADERS)


__all__ = [
    "JOB_HEADERS",
    "TICK_HEADERS",
    "describe_executor",
    "describe_labels",
    "describe_schedule",
    "job_json",
    "job_row",
    "jobs_table",
    "runs_cells",
    "runs_json",
    "tick_json",
    "tick_row",
]
