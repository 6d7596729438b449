"""``shardcron jobs apply`` and ``jobs diff``: a job file as the cluster's schedules (schedules as code).

``diff`` reads the file and the jobs of every namespace it names, and prints
the plan (``rules.job_plan``): what ``apply`` would create, change field by
field, leave alone, and what the cluster holds that the file no longer has.
It exits as ``diff(1)`` does: 0 no difference, 1 a difference, 2 trouble (any
error, as a usage error already is), so that CI can gate on drift. A job that
holds a secret value (which every answer masks) and otherwise reads the same is
sent as a PutJobs ``validate_only``, whose answer says whether its write would
change it; a token that may not write gets a plan that says which jobs' secret
values went uncompared.

``apply`` writes the file in two passes. First the whole file goes to the
servers with ``validate_only``: each job's shard leader runs every check of the
write (the node's and cluster's limits, the token's namespaces, quotas, the
store) and writes nothing. Only if every job passed does the second pass write
them. Jobs of different shards are written by different leaders, so the write
itself is not one transaction: a leader lost between the passes leaves some
jobs written and others not, which ``apply`` reports job by job; applying the
file again converges, as an unchanged job is left as it is. See
docs/adr/0009-apply-validates-the-whole-file-first.md.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardcron.cli.common import add_api_command, api_client, print_json, table
from shardcron.cli.plan_output import plan_json, plan_text
from shardcron.errors import InvalidJob, ShardcronError, job_named
from shardcron.jobkey import DEFAULT_NAMESPACE, display_key, namespace_of, split_key
from shardcron.model import Job
from shardcron.rules.job_plan import SOURCE_LABEL, Plan, has_secrets, plan, with_secret_checks, with_source
from shardcron.spec.calendar import Calendar
from shardcron.spec.jobfile import JobFileError, read_job_file
from shardcron.spec.namespaces import namespace_from_cli, namespace_or_default

if TYPE_CHECKING:
    from collections.abc import Callable

    from shardcron.client.client import Client
    from shardcron.client.results import PutResult

# diff(1)'s statuses (terraform plan -detailed-exitcode uses 2 for a difference instead, and 1 for an error;
# here 1 would be ambiguous: every other command's error is 1).
DIFF_SAME = 0
DIFF_DIFFERENT = 1
DIFF_TROUBLE = 2  # any error; a usage error is 2 already (argparse)


class ApplyFailed(ShardcronError):
    """Some jobs of a file were refused or not written (each is listed above the error line)."""


@dataclass(frozen=True)
class FileState:
    """What a job file wants: its jobs by key (the source label on each), its calendars, its namespaces."""

    path: str
    jobs: list[Job]
    calendars: list[Calendar]
    namespaces: tuple[str, ...]


def file_state(a: argparse.Namespace) -> FileState:
    """The file ``-f`` names, read and checked here before any call: each job's namespace resolved (its own,
    the file's, else ``-n``/SHARDCRON_NAMESPACE, else ``default``) and its source label added."""
    fallback = namespace_from_cli(getattr(a, "namespace", None), os.environ)
    read = read_job_file(a.file, fallback)  # every key names its namespace: a bare one is default's
    source = a.source or os.path.normpath(a.file)
    jobs = []
    for job in read.jobs:
        try:
            jobs.append(with_source(job, source))
        except InvalidJob as e:
            raise JobFileError(
                f"{a.file}: {job_named(job.id)}: {e} (the {SOURCE_LABEL} label apply adds: choose it with --source)"
            ) from None
    named = {namespace_of(j.id) for j in jobs}
    if read.namespace is not None:
        named.add(namespace_or_default(read.namespace))
    return FileState(a.file, jobs, read.calendars, tuple(sorted(named or {fallback})))


def stored_plan(client: Client, wanted: FileState) -> Plan:
    """The plan of ``wanted`` against the jobs the cluster holds in its namespaces, as the API shows them
    (secret values masked, so a job that differs only in one reads unchanged)."""
    stored = [j for ns in wanted.namespaces for j in client.list_jobs(namespace=ns)]
    return plan(wanted.jobs, stored, wanted.namespaces)


def current_plan(client: Client, wanted: FileState) -> Plan:
    """The plan of ``wanted`` against the jobs the cluster holds in its namespaces, secret values included."""
    return secrets_compared(client, wanted.jobs, stored_plan(client, wanted))


def secrets_compared(client: Client, jobs: list[Job], p: Plan) -> Plan:
    """``p`` with the servers' word on the unchanged jobs that hold secret values: a PutJobs ``validate_only``
    answers, for each, whether its write would change the stored job. Needs the write's permission; without
    it (a read token) those jobs stay unchanged and the plan lists them as not compared."""
    from shardcron.client.errors import ApiError  # grpc: see cli/common.py

    unchanged = set(p.unchanged)
    asked = [j for j in jobs if j.id in unchanged and has_secrets(j)]
    if not asked:
        return p
    try:
        answers = client.put_jobs(asked, validate_only=True)
    except ApiError as e:
        if e.code.name != "PERMISSION_DENIED":
            raise
        return with_secret_checks(p, (), (j.id for j in asked))
    pairs = list(zip(asked, answers, strict=True))
    return with_secret_checks(
        p, (j.id for j, r in pairs if r.ok and not r.unchanged), (j.id for j, r in pairs if not r.ok)
    )


def show_plan(a: argparse.Namespace, p: Plan, *, prune: bool) -> None:
    if a.json:
        print_json(plan_json(p, a.file, prune=prune))
    else:
        print(plan_text(p, a.file, prune=prune))


# -- jobs diff -----------------------------------------------------------------------------


def file_client(a: argparse.Namespace) -> Client:
    """The API client of a file's commands: the file's keys name their namespaces (``file_state``), so a bare
    key is a ``default`` job, whatever ``-n`` says."""
    return api_client(a, namespace=DEFAULT_NAMESPACE)


def cmd_diff(a: argparse.Namespace) -> int:
    wanted = file_state(a)
    with file_client(a) as c:
        p = current_plan(c, wanted)
    show_plan(a, p, prune=False)
    return DIFF_DIFFERENT if p.differs else DIFF_SAME


# -- jobs apply ----------------------------------------------------------------------------


def cmd_apply(a: argparse.Namespace) -> int:
    wanted = file_state(a)
    with file_client(a) as c:
        if a.dry_run:
            show_plan(a, current_plan(c, wanted), prune=a.prune)
            return 0
        # Prune needs only the jobs the file does not have, which secret values do not change: no
        # validate_only round to compare them.
        before = stored_plan(c, wanted) if a.prune else None
        # The file's calendars first: its jobs may name them, and a job is checked against the calendars
        # its leader knows.
        for calendar in wanted.calendars:
            stored = c.put_calendar(calendar)
            if not a.json:
                print(f"calendar {calendar.name} version {stored.version}")
        checked = c.put_jobs(wanted.jobs, validate_only=True)
        if any(not r.ok for r in checked):
            show_results(a, [(j, result_row(j, r, applied=False)) for j, r in zip(wanted.jobs, checked, strict=True)])
            raise ApplyFailed(refusal(a.file, wanted.jobs, checked))
        results = c.put_jobs(wanted.jobs)
        failed = sum(1 for r in results if not r.ok)
        pruned = prune(c, before.not_in_file) if before is not None and not failed else []
    rows = [(j, result_row(j, r, applied=True)) for j, r in zip(wanted.jobs, results, strict=True)]
    show_results(a, rows + pruned)
    if failed:
        raise ApplyFailed(
            f"{failed} of {len(results)} jobs in {a.file} were not written after all passed validation "
            "(each is listed above; the others were written): run the same apply again, it converges"
        )
    if any(not row.ok for _, row in pruned):
        raise ApplyFailed(
            f"{sum(1 for _, row in pruned if not row.ok)} of {len(pruned)} jobs to prune were not deleted "
            "(each is listed above): run the same apply --prune again"
        )
    return 0


@dataclass(frozen=True)
class Row:
    """One job's line of ``apply``'s answer: written, only checked, refused, or pruned."""

    ok: bool
    code: str  # the gRPC status name
    detail: str  # created, updated, unchanged, "valid, not written", deleted (--prune), or the server's reason
    applied: bool = False  # the cluster holds it as the file says now (written, unchanged, or deleted)
    version: int | None = None
    unchanged: bool = False
    deleted: bool = False


def result_row(job: Job, r: PutResult, *, applied: bool) -> Row:
    """A PutJobs result as a row; ``applied``: of the write, not of the check before it."""
    if not r.ok:
        return Row(False, r.code, r.message)
    if not applied or r.job is None:
        return Row(True, r.code, "valid, not written", unchanged=r.unchanged)
    detail = "unchanged" if r.unchanged else "created" if r.job.version == 1 else "updated"
    return Row(True, r.code, detail, applied=True, version=r.job.version, unchanged=r.unchanged)


def refusal(path: str, jobs: list[Job], checked: list[PutResult]) -> str:
    """The error of a file the servers refused: nothing was written; the first refused job and why."""
    refused = [(j, r) for j, r in zip(jobs, checked, strict=True) if not r.ok]
    job, first = refused[0]
    more = f" (and {len(refused) - 1} more, listed above)" if len(refused) > 1 else ""
    return f"{path}: nothing was written: {job_named(job.id)}: {first.message or first.code}{more}"


def show_results(a: argparse.Namespace, rows: list[tuple[Job, Row]]) -> None:
    if a.json:
        print_json([row_json(job, row) for job, row in rows])
        return
    cells = [
        [display_key(j.id), "ok" if r.ok else r.code, "-" if r.version is None else r.version, r.detail]
        for j, r in rows
    ]
    print(table(cells, ["ID", "RESULT", "VERSION", "DETAIL"]))


def row_json(job: Job, row: Row) -> dict[str, Any]:
    key = split_key(job.id)
    return {
        "id": key.id,
        "namespace": key.namespace,
        "ok": row.ok,
        "applied": row.applied,
        "code": row.code,
        "message": "" if row.ok else row.detail,
        "version": row.version,
        "unchanged": row.unchanged,
        "deleted": row.deleted,
    }


def prune(client: Client, gone: tuple[Job, ...]) -> list[tuple[Job, Row]]:
    """Delete the jobs of the file's namespaces that it no longer has (``--prune``): every one is tried."""
    from shardcron.client.errors import ApiError, NotFound  # grpc: see cli/common.py

    rows = []
    for job in gone:
        try:
            client.delete_job(job.id)
            row = Row(True, "OK", "deleted (--prune)", applied=True, deleted=True)
        except NotFound:
            row = Row(True, "OK", "already gone (--prune)", applied=True, deleted=True)
        except ApiError as e:
            row = Row(False, e.code.name, f"not deleted (--prune): {e}")
        rows.append((job, row))
    return rows


# -- the parser ----------------------------------------------------------------------------

FILE_HELP = "the jobs file (TOML, YAML or JSON; see `shardcron jobs apply --help`)"
SOURCE_HELP = (
    "the value of the shardcron.io/source label put on every job (default: the file's path as given); "
    "a job that sets that label itself keeps its own"
)
APPLY_EPILOG = """\
All or nothing, as far as a sharded cluster allows: the whole file is first
checked by the servers (each job by its shard's leader, as its write would be:
limits, permissions, quotas) and nothing is written unless every job passes; a
refusal names the job and the field. The write that follows is one transaction
per leader, not one for the file: if a leader moves or the store fails between
the check and the write, some jobs are written and some not, each listed; run
the same apply again, it converges (an unchanged job is left as it is). A
file's calendars are put before its jobs are checked (jobs may name them).
--prune deletes the jobs of the file's namespaces that the file does not have,
after every job was written; never a job of another namespace.
"""
DIFF_EPILOG = """\
Exit status, as diff(1): 0 no difference, 1 a difference, 2 an error.
A job is compared in its file form with secrets masked (as the API shows it),
without its version and paused state (apply keeps a stored job's pause). A job
whose secret values (secret headers, a broker URL's password) may differ is
checked by the servers as `apply` would write it, which needs a token that may
write; with a read-only token, such jobs are listed as not compared. The file's
calendars are not compared.
"""


def file_command(
    sub: Any, name: str, fn: Callable[[argparse.Namespace], int], help_: str, epilog: str
) -> argparse.ArgumentParser:
    """A subcommand that reads a job file: the API's flags, ``-f`` and ``--source``, and ``epilog`` as written."""
    p = add_api_command(sub, name, fn, help_, with_id=False)
    p.epilog = epilog
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("-f", "--file", required=True, metavar="FILE", help=FILE_HELP)
    p.add_argument("--source", metavar="NAME", help=SOURCE_HELP)
    return p


def register(sub: Any) -> None:
    """Add ``jobs apply`` and ``jobs diff`` (called by ``cli.jobs.register``)."""
    apply = file_command(
        sub, "apply", cmd_apply, "create or replace every job of a TOML, YAML or JSON file", APPLY_EPILOG
    )
    apply.add_argument(
        "--prune", action="store_true", help="then delete the jobs of the file's namespaces that it does not have"
    )
    apply.add_argument(
        "--dry-run", action="store_true", help="print what apply would change (as `jobs diff`) and change nothing"
    )

    diff = file_command(
        sub, "diff", cmd_diff, "show what `jobs apply` would change: exit 0 if nothing, 1 if something", DIFF_EPILOG
    )
    diff.set_defaults(error_status=DIFF_TROUBLE)


__all__ = ["ApplyFailed", "DIFF_DIFFERENT", "DIFF_SAME", "DIFF_TROUBLE", "cmd_apply", "cmd_diff", "register"]
