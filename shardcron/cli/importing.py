"""``shardcron import SOURCE ...``: schedules from elsewhere written as a job file (docs/how-to/import.md).

    shardcron import crontab FILE [--system] [--timezone ZONE]
    shardcron import k8s-cronjob FILE.yaml --as http --url URL | --as shell
    shardcron import celery-beat MODULE:APP
    shardcron import apscheduler URL

Common: ``--format toml|yaml|json`` (default toml), ``-o FILE`` (default stdout), ``--namespace NS``. FILE ``-``
is standard input. The summary goes to stderr; with ``--format json`` so do the notes and refusals, which
JSON cannot hold as comments. Exit 0 when at least one job was imported, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from shardcron.errors import InvalidJob, ShardcronError
from shardcron.importers.result import ImportResult
from shardcron.importers.writer import FORMATS, render
from shardcron.spec.durations import load_timezone
from shardcron.spec.namespaces import validate_namespace


class ImportCommandError(ShardcronError):
    pass


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("import", help="translate crontabs, CronJobs, Celery beat or APScheduler into a job file")
    sources = p.add_subparsers(dest="source", metavar="SOURCE")
    sources.required = True

    crontab = _source(sources, "crontab", "a crontab file: each entry a shell job", cmd_crontab)
    crontab.add_argument("file", metavar="FILE", help="the crontab (- for standard input)")
    crontab.add_argument("--system", action="store_true", help="a system crontab: the sixth field is a user")
    crontab.add_argument(
        "--timezone", default="UTC", metavar="ZONE", help="the zone cron read the lines in (default UTC)"
    )

    k8s = _source(sources, "k8s-cronjob", "Kubernetes CronJob manifests", cmd_k8s)
    k8s.add_argument("file", metavar="FILE", help="a YAML stream of manifests (- for standard input)")
    k8s.add_argument("--as", dest="as_kind", choices=("http", "shell"), required=True, help="what each job runs")
    k8s.add_argument("--url", help="with --as http: the URL each job calls")

    celery = _source(sources, "celery-beat", "a Celery app's beat_schedule", cmd_celery_beat)
    celery.add_argument("app", metavar="MODULE:APP", help="the Celery app, as celery -A names it")

    aps = _source(sources, "apscheduler", "an APScheduler job store", cmd_apscheduler)
    aps.add_argument("url", metavar="URL", help="the job store's database URL")
    aps.add_argument("--table", default="apscheduler_jobs", help="the job store's table (default apscheduler_jobs)")


def _source(
    sources: argparse._SubParsersAction, name: str, help_text: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    p = sources.add_parser(name, help=help_text)
    p.add_argument("--format", choices=FORMATS, default="toml", help="the job file's format (default toml)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the job file here (default standard output)")
    p.add_argument("--namespace", metavar="NS", help="the file's top-level namespace")
    p.set_defaults(func=func)
    return p


def cmd_crontab(a: argparse.Namespace) -> int:
    from shardcron.importers.crontab import import_crontab

    try:
        load_timezone(a.timezone, "--timezone")
    except InvalidJob as e:
        raise ImportCommandError(str(e)) from None
    return _write(import_crontab(_read(a.file), _name(a.file), system=a.system, timezone=a.timezone), a)


def cmd_k8s(a: argparse.Namespace) -> int:
    from shardcron.importers.k8s_cronjob import import_k8s_cronjobs

    if a.as_kind == "http" and not a.url:
        raise ImportCommandError("import k8s-cronjob --as http needs --url, the URL each job calls")
    if a.as_kind == "shell" and a.url:
        raise ImportCommandError("import k8s-cronjob --as shell takes no --url")
    return _write(import_k8s_cronjobs(_read(a.file), _name(a.file), a.as_kind, a.url), a)


def cmd_celery_beat(a: argparse.Namespace) -> int:
    from shardcron.importers.celery_beat import import_celery_beat

    _project_importable()
    return _write(import_celery_beat(a.app), a)


def cmd_apscheduler(a: argparse.Namespace) -> int:
    from shardcron.importers.apscheduler_store import import_apscheduler

    _project_importable()
    return _write(import_apscheduler(a.url, a.table), a)


def _project_importable() -> None:
    """The current directory first on the import path, as ``celery -A`` puts it: the importers import the
    project's own modules (its Celery app, its jobs' functions)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


def _read(path: str) -> str:
    from shardcron.spec.jobfile import read_text_file  # bounded, UTF-8 only, "-" is stdin

    return read_text_file(path)


def _name(path: str) -> str:
    return "stdin" if path == "-" else path


def _write(result: ImportResult, a: argparse.Namespace) -> int:
    """Write the job file, say what was done on stderr; 0 when a job was imported."""
    if a.namespace is not None:
        try:
            validate_namespace(a.namespace)
        except InvalidJob as e:
            raise ImportCommandError(f"--namespace: {e}") from None
    rendered = render(result, a.format, a.namespace)
    if a.output:
        try:
            Path(a.output).write_text(rendered.text, encoding="utf-8")
        except OSError as e:
            raise ImportCommandError(f"{a.output}: cannot write: {e.strerror or e}") from None
    else:
        sys.stdout.write(rendered.text)
    for line in rendered.comments:
        print(f"# {line}", file=sys.stderr)
    print(summary(result, a.format), file=sys.stderr)
    if not result.jobs:
        raise ImportCommandError("nothing imported" + (" (see the refusals)" if result.refused else ": no entries"))
    return 0


def summary(result: ImportResult, fmt: str) -> str:
    """A line such as "12 jobs, 2 refused (see the comments)"."""
    jobs = f"{len(result.jobs)} job{'' if len(result.jobs) == 1 else 's'}"
    if not result.refused:
        return jobs
    where = "above" if fmt == "json" else "the comments"
    return f"{jobs}, {len(result.refused)} refused (see {where})"
