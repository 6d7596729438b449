"""Whether this node admits a job: the checks that depend on the node's flags, the cluster's config and the clock.

PutJob and PutJobs ask here twice, on the node that receives the call (a quick
answer) and on the shard's leader before it writes (the leader decides: its
--allow-shell and --shell-allow, and the cluster's minimum interval as it
mirrors it now).
"""

from __future__ import annotations

from shardcron import clock
from shardcron.abc import Backend
from shardcron.errors import InvalidJob
from shardcron.executors.admission import check_admissible
from shardcron.model import Job


def check_job(backend: Backend, job: Job, now_ms: int | None = None) -> None:
    """Raise ``InvalidJob`` unless ``backend``'s node accepts ``job`` (--allow-shell, --shell-allow,
    --allow-python, the extra a broker kind needs, the cluster's minimum interval,
    ``shardcron config --min-interval``, and its calendars exist)."""
    check_admissible(
        job,
        allow_shell=backend.allow_shell,
        now_ms=clock.wall_ms() if now_ms is None else now_ms,
        shell_allow=backend.shell_allow,
        min_interval_ms=backend.min_interval_ms,
        allow_python=backend.allow_python,
        store_dialect=backend.engine.dialect.name,
    )
    if job.calendars:
        check_calendars(backend, job)


def check_calendars(backend: Backend, job: Job) -> None:
    """``InvalidJob`` naming the first calendar of ``job`` this node does not know (its copy follows the
    store through a watch: a calendar put a moment ago elsewhere may need a moment to be known here)."""
    known = backend.calendars.names()
    for i, name in enumerate(job.calendars):
        if name not in known:
            raise InvalidJob(
                f"calendars[{i}]",
                f"unknown calendar {name!r}; put it first "
                "(`shardcron calendars put FILE`), or see `shardcron calendars list`",
            )
