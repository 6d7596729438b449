"""Kubernetes CronJobs (a YAML stream of manifests, ``List`` objects too) as shardcron jobs.

What maps, and how:

* ``spec.schedule``: five fields or a macro (``importers.cron_fields``, robfig/cron's dialect); a ``TZ=`` or
  ``CRON_TZ=`` prefix, which Kubernetes refuses, is refused too. ``spec.timeZone`` is the job's timezone
  (absent: UTC, with a note: the controller manager read it in its own zone).
* ``concurrencyPolicy``: ``Allow`` is ``overlap = "allow"``, ``Forbid`` is ``"skip"``; ``Replace`` (stop the
  running job, start the new one) has no equivalent and becomes ``"skip"`` with a note.
* Missed slots: Kubernetes starts only the most recent (``catchup = "latest"``), within
  ``startingDeadlineSeconds`` (``catchup_window``).
* ``suspend`` is ``paused``; ``jobTemplate.spec.backoffLimit`` (default 6) is the retries, with Kubernetes'
  backoff (10s doubling, at most 6m); ``jobTemplate.spec.activeDeadlineSeconds`` is ``timeout``.
* The pod cannot run as it is. ``as_kind="http"`` calls ``url``; ``as_kind="shell"`` runs the one container's
  ``command`` and ``args`` (``shlex.join``). Each job's notes name what was left out (image, env, volumes...).

Documents of other kinds are refused entries, not errors; YAML that does not parse is an error naming the
document. The stream is read with the job file's bounded loader (no anchors nor aliases).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

import yaml

from shardcron.errors import InvalidJob, ShardcronError
from shardcron.importers.cron_fields import UnsupportedSchedule, translate_schedule
from shardcron.importers.result import Imported, ImportResult, Refused, UniqueIds, id_stem
from shardcron.spec.bounds import cut, shown
from shardcron.spec.job import job_from_dict
from shardcron.spec.jobfile import BoundedYamlLoader, RefusedYaml

AS_KINDS = ("http", "shell")
API_VERSIONS = ("batch/v1", "batch/v1beta1")
_OVERLAP = {"Allow": "allow", "Forbid": "skip", "Replace": "skip"}
_DEFAULT_BACKOFF_LIMIT = 6
_HOW_JOBS_RUN = {
    "http": "every job calls {url}; the X-Shardcron-Job-Id header of each call says which job it is",
    "shell": "each job runs its container's command and args on the node, without the container; "
    "nodes run shell jobs only when started with --allow-shell",
}
# The pod spec's keys the shell form uses; every other key present is named as left out.
_USED_CONTAINER_KEYS = frozenset({"name", "command", "args"})


class ManifestError(ShardcronError):
    """A manifest stream that cannot be read at all (not YAML, an alias): names the document."""


class _Unusable(Exception):
    """One CronJob that cannot become a job; the message says which field and why."""


def import_k8s_cronjobs(text: str, source_name: str, as_kind: str, url: str | None = None) -> ImportResult:
    """The CronJobs of the YAML stream ``text`` as jobs that run ``as_kind`` (``http`` calling ``url``, or
    ``shell`` running the container's command)."""
    if as_kind not in AS_KINDS:
        raise ValueError(f"as_kind must be one of {', '.join(AS_KINDS)}, got {as_kind!r}")
    if as_kind == "http" and not url:
        raise ValueError("as_kind 'http' needs the url each job calls")
    result = ImportResult(notes=[_HOW_JOBS_RUN[as_kind].format(url=url)])
    ids = UniqueIds()
    for where, obj in _objects(text, source_name):
        entry = _entry(where, obj, as_kind, url, ids)
        if isinstance(entry, Refused):
            result.refused.append(entry)
        else:
            result.jobs.append(entry)
    return result


def _objects(text: str, source_name: str) -> list[tuple[str, Any]]:
    """Each object of the stream with where it stands; a ``List``'s items each stand on their own."""
    documents: list[Any] = []
    loader = BoundedYamlLoader(text)
    try:
        while loader.check_data():
            documents.append(loader.get_data())
    except (RefusedYaml, yaml.YAMLError) as e:
        raise ManifestError(f"{source_name}: document {len(documents) + 1}: {_yaml_problem(e)}") from None
    finally:
        loader.dispose()
    found: list[tuple[str, Any]] = []
    for number, doc in enumerate(documents, start=1):
        where = f"{source_name} document {number}"
        if isinstance(doc, Mapping) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            found += [(f"{where} item {i}", item) for i, item in enumerate(doc["items"], start=1)]
        elif doc is not None:
            found.append((where, doc))
    return found


def _entry(where: str, obj: Any, as_kind: str, url: str | None, ids: UniqueIds) -> Imported | Refused:
    if not isinstance(obj, Mapping):
        return Refused(where, "not a Kubernetes object (a mapping with kind and metadata)", _shown(obj))
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "default")
    kind_and_name = cut(f"{obj.get('kind')} {namespace}/{name}", 200)
    where = f"{where} ({kind_and_name})"
    if obj.get("kind") != "CronJob":
        return Refused(where, f"a {shown(obj.get('kind'))}, not a CronJob: nothing to schedule")
    if obj.get("apiVersion") not in API_VERSIONS:
        return Refused(where, f"apiVersion {shown(obj.get('apiVersion'))}: expected one of {', '.join(API_VERSIONS)}")
    try:
        job, notes = _job(obj, as_kind, url)
    except (_Unusable, UnsupportedSchedule) as e:
        return Refused(where, str(e), _shown(obj.get("spec")))
    job = {"id": ids.take(id_stem(f"{namespace}-{name}")), **job}
    try:
        job_from_dict(job, require_executor=True)
    except InvalidJob as e:
        return Refused(where, f"shardcron refuses it: {e}", _shown(obj.get("spec")))
    return Imported(where, job, tuple(notes))


def _job(obj: Mapping[str, Any], as_kind: str, url: str | None) -> tuple[dict[str, Any], list[str]]:
    """The job's table (without its id) and its notes."""
    spec = _table(obj, "spec")
    schedule = spec.get("schedule")
    if not isinstance(schedule, str):
        raise _Unusable("spec.schedule: missing, or not a string")
    if schedule.lstrip().startswith(("TZ=", "CRON_TZ=")):
        raise _Unusable("spec.schedule: a TZ= or CRON_TZ= prefix, which Kubernetes refuses; use spec.timeZone")
    translated = translate_schedule(schedule, "k8s")
    notes = list(translated.notes)
    zone = spec.get("timeZone")
    if zone is None:
        notes.append("no spec.timeZone: read in UTC (Kubernetes used the controller manager's zone)")
    policy = spec.get("concurrencyPolicy", "Allow")
    if policy not in _OVERLAP:
        raise _Unusable(f"spec.concurrencyPolicy: {shown(policy)} is not Allow, Forbid or Replace")
    if policy == "Replace":
        notes.append("concurrencyPolicy Replace: shardcron cannot stop the running job; it skips the new slot")
    job_spec = _table(_table(spec, "jobTemplate"), "spec")
    attempts = _whole(job_spec, "backoffLimit", _DEFAULT_BACKOFF_LIMIT) + 1
    job: dict[str, Any] = {"cron": translated.cron, "timezone": zone or "UTC", "overlap": _OVERLAP[policy]}
    job["catchup"] = "latest"
    if "startingDeadlineSeconds" in spec:
        job["catchup_window"] = f"{_whole(spec, 'startingDeadlineSeconds', 0)}s"
    if "activeDeadlineSeconds" in job_spec:
        job["timeout"] = f"{_whole(job_spec, 'activeDeadlineSeconds', 0)}s"
    job["retry"] = {"max_attempts": attempts, "backoff": "10s", "backoff_max": "6m"}
    if spec.get("suspend") is True:
        job["paused"] = True
    executor, left_out = _executor(job_spec, as_kind, url)
    job["executor"] = executor
    if left_out:
        notes.append("left out: " + "; ".join(left_out))
    return job, notes


def _executor(job_spec: Mapping[str, Any], as_kind: str, url: str | None) -> tuple[dict[str, Any], list[str]]:
    """The executor table, and what of the pod it leaves out."""
    pod = _table(_table(job_spec, "template"), "spec")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, Mapping) for c in containers):
        raise _Unusable("spec.jobTemplate.spec.template.spec.containers: missing, or not a list of containers")
    left_out = [f"pod {key}" for key in pod if key != "containers"]
    if as_kind == "http":
        left_out += [f"container {shown(c.get('name'))} (image {shown(c.get('image'))})" for c in containers]
        return {"kind": "http", "url": url}, left_out
    if len(containers) != 1:
        raise _Unusable(f"{len(containers)} containers: a shell job runs one command; import --as http instead")
    container = containers[0]
    argv = [*_strings(container, "command"), *_strings(container, "args")]
    if not container.get("command"):
        raise _Unusable("the container has no command (the image's ENTRYPOINT runs): write the shell job by hand")
    left_out += [
        f"container image {shown(value)}" if key == "image" else f"container {key}"
        for key, value in container.items()
        if key not in _USED_CONTAINER_KEYS
    ]
    return {"kind": "shell", "command": shlex.join(argv)}, left_out


def _table(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if not isinstance(value, Mapping):
        raise _Unusable(f"{key}: missing, or not a mapping")
    return value


def _whole(parent: Mapping[str, Any], key: str, default: int) -> int:
    value = parent.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Unusable(f"{key}: {shown(value)} is not a whole number of at least 0")
    return value


def _strings(container: Mapping[str, Any], key: str) -> list[str]:
    value = container.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Unusable(f"container {key}: not a list of strings")
    return value


def _shown(value: Any, limit: int = 2000) -> str:
    """A value as YAML, for a refused entry's comment."""
    text = yaml.safe_dump(value, sort_keys=False, allow_unicode=True) if value is not None else ""
    return cut(text.rstrip("\n").removesuffix("\n..."), limit)


def _yaml_problem(e: Exception) -> str:
    """A YAML error on one line: where, and what PyYAML found (its own text spans several lines)."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}"
    return cut(" ".join(str(e).split()), 400)
