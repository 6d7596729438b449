"""Admission: the checks of a valid job that depend on the cluster, the node and the clock, not on the job alone.

The node's flags decide them (``--allow-shell``, ``--shell-allow``, ``--allow-python``,
``--min-interval``) along with what the node has installed (``extras``).
"""

from __future__ import annotations

import re

from shardcron.errors import InvalidJob
from shardcron.executors.extras import require_extra
from shardcron.executors.python_target import check_target
from shardcron.model import ExecutorKind, Job, PythonSpec, ScheduleKind
from shardcron.spec.bounds import DEFAULT_MIN_INTERVAL_MS, shown
from shardcron.spec.durations import format_duration_ms
from shardcron.spec.schedule import shortest_gap_ms


def check_admissible(
    job: Job,
    *,
    allow_shell: bool,
    now_ms: int,
    shell_allow: re.Pattern[str] | None = None,
    min_interval_ms: int = DEFAULT_MIN_INTERVAL_MS,
    allow_python: tuple[str, ...] = (),
    store_dialect: str | None = None,
) -> None:
    """The checks that depend on the cluster, the node and the clock, not on the job alone.

    ``shell_allow``: a compiled pattern every shell command must match in full (``--shell-allow``).
    ``min_interval_ms``: the shortest gap between slots the cluster accepts (``--min-interval``).
    ``allow_python``: the module prefixes Python jobs may call (``--allow-python``).
    ``store_dialect``: the store's SQLAlchemy dialect name, for Python jobs that take a fenced session.
    """
    require_extra(job.executor.kind)
    if job.executor.kind is ExecutorKind.PYTHON:
        _check_python(job.executor.python, allow_python, store_dialect)
    gap = shortest_gap_ms(job.schedule, below_ms=min_interval_ms)
    if gap is not None and gap < min_interval_ms:
        field, what = (
            ("schedule.cron", f"{shown(job.schedule.cron)} has slots {format_duration_ms(gap)} apart")
            if job.schedule.kind is ScheduleKind.CRON
            else ("schedule.every", f"every {format_duration_ms(gap)}")
        )
        raise InvalidJob(
            field,
            f"{what}: shorter than this cluster's minimum interval of "
            f"{format_duration_ms(min_interval_ms)}; to allow it, lower the cluster's minimum with "
            "`shardcron config --min-interval DURATION`",
        )
    _check_notifications_admissible(job, allow_shell=allow_shell, allow_python=allow_python)
    if job.executor.kind is ExecutorKind.SHELL and not allow_shell:
        raise InvalidJob(
            "executor.kind", "shell jobs are refused: the nodes run without --allow-shell (remote code execution guard)"
        )
    if (
        job.executor.shell is not None
        and shell_allow is not None
        and not shell_allow.fullmatch(job.executor.shell.command)
    ):
        raise InvalidJob("executor.command", "does not match this cluster's --shell-allow list")
    sched = job.schedule
    if sched.kind is ScheduleKind.ONCE and sched.at_ms is not None and sched.at_ms < now_ms - job.catchup_window_ms:
        raise InvalidJob("schedule.at", "is in the past, beyond the job's catch-up window; it would never run")


def _check_notifications_admissible(job: Job, *, allow_shell: bool, allow_python: tuple[str, ...]) -> None:
    """A notification runs on the leader like the job's executor: the same node guards apply to it."""
    for field, spec in (("on_failure", job.on_failure), ("on_recovery", job.on_recovery)):
        if spec is None:
            continue
        require_extra(spec.kind)
        if spec.kind is ExecutorKind.SHELL and not allow_shell:
            raise InvalidJob(f"{field}.kind", "shell notifications are refused: the nodes run without --allow-shell")
        if spec.python is not None:  # a python notification's spec
            refused = check_target(spec.python.target, allow_python)
            if refused is not None:
                raise InvalidJob(f"{field}.target", refused)


def _check_python(spec: PythonSpec | None, allow_python: tuple[str, ...], store_dialect: str | None) -> None:
    """A python job: the node must allow Python jobs, and this target under its prefixes."""
    if not allow_python:
        raise InvalidJob(
            "executor.kind",
            "python jobs are refused: the nodes run without --allow-python MODULE_PREFIX (remote code execution guard)",
        )
    if spec is None:  # never from job_from_dict, which gives every python job its spec
        raise InvalidJob("executor.target", "a python job needs a target")
    if spec.session and store_dialect == "sqlite":
        raise InvalidJob(
            "executor.session",
            "a fenced session needs a PostgreSQL or MariaDB store: on SQLite its "
            "open transaction would hold the whole file's write lock while the job runs",
        )
    refused = check_target(spec.target, allow_python)  # imports the module: the checks without it come first
    if refused is not None:
        raise InvalidJob("executor.target", refused)
