"""What applying a job file would change: the plan ``shardcron jobs diff`` and ``apply --dry-run`` print.

Pure: the jobs a file defines (their ids already resolved to keys, the source
label already added: ``with_source``) against the jobs the cluster holds in
the namespaces the file names. Each job is compared in its file form
(``spec.job.redacted``: the form a person writes, secrets masked as every
API answer masks them), without what a file does not set on an existing job:
its ``version`` (the store's) and its ``paused`` state (PutJobs keeps a
stored job's pause; a file's ``paused`` matters only to a job it creates).

A secret value (a masked header, a broker URL's password) reads the same on
both sides, so a change to it alone is not seen by comparing; only a server,
which holds the values, can tell (a PutJobs ``validate_only`` answers whether
each write would change its job). ``with_secret_checks`` folds its answers in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shardcron.jobkey import namespace_of
from shardcron.model import Job
from shardcron.spec.headers import MASK
from shardcron.spec.job import job_from_dict, job_to_dict, redacted

# The label ``apply`` puts on every job it writes: the file the job came from (kubectl's
# ``app.kubernetes.io/managed-by`` idea). A key of the label rules (spec.job): printable, at most 256 characters.
SOURCE_LABEL = "shardcron.io/source"


class Absent:
    """A field one side of a change does not have (a label added, a jitter removed)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = Absent()

# A job whose only difference is a secret value: the field its change names, and its two sides.
SECRET_VALUES = "(secret values)"
SECRET_CHANGED = f"{MASK} (another value)"


@dataclass(frozen=True)
class FieldChange:
    """One field of a job, by its dotted path in the file form (``schedule.cron``, ``labels.team``)."""

    field: str
    old: Any  # ABSENT when the stored job has no such field
    new: Any  # ABSENT when the file's job has none


@dataclass(frozen=True)
class JobChange:
    key: str  # the job's key (``jobkey``)
    fields: tuple[FieldChange, ...]


@dataclass(frozen=True)
class Plan:
    """Each job of the file, and each of the cluster's that the file no longer has, in key order."""

    created: tuple[Job, ...]
    changed: tuple[JobChange, ...]
    unchanged: tuple[str, ...]  # keys
    not_in_file: tuple[Job, ...]  # in a namespace the file names
    namespaces: tuple[str, ...]  # the namespaces the file names, sorted
    secrets_unchecked: tuple[str, ...] = ()  # keys of unchanged jobs whose secret values no server compared

    @property
    def differs(self) -> bool:
        return bool(self.created or self.changed or self.not_in_file)


def plan(desired: Sequence[Job], stored: Iterable[Job], namespaces: Iterable[str]) -> Plan:
    """What applying ``desired`` changes among the ``stored`` jobs of ``namespaces`` (stored jobs of other
    namespaces are not the file's business and are left out)."""
    names = tuple(sorted(set(namespaces)))
    held = {j.id: j for j in stored if namespace_of(j.id) in names}
    wanted = {j.id: j for j in desired}
    created, changed, unchanged = [], [], []
    for key in sorted(wanted):
        old = held.get(key)
        if old is None:
            created.append(wanted[key])
        elif fields := field_changes(old, wanted[key]):
            changed.append(JobChange(key, tuple(fields)))
        else:
            unchanged.append(key)
    extra = tuple(held[k] for k in sorted(held.keys() - wanted.keys()))
    return Plan(tuple(created), tuple(changed), tuple(unchanged), extra, names)


def with_secret_checks(p: Plan, differing: Iterable[str], unchecked: Iterable[str]) -> Plan:
    """``p`` with the servers' word on the secret values of its unchanged jobs: the keys in ``differing``
    change (a secret value differs), those in ``unchecked`` stay unchanged but are listed as not compared."""
    moved = set(differing) & set(p.unchanged)
    secret = tuple(JobChange(k, (FieldChange(SECRET_VALUES, MASK, SECRET_CHANGED),)) for k in moved)
    return replace(
        p,
        changed=tuple(sorted(p.changed + secret, key=lambda c: c.key)),
        unchanged=tuple(k for k in p.unchanged if k not in moved),
        secrets_unchecked=tuple(sorted(set(unchecked) & set(p.unchanged) - moved)),
    )


def has_secrets(job: Job) -> bool:
    """Whether ``job`` holds a value every API answer masks (so comparing file forms cannot see it change)."""
    return redacted(job) != job_to_dict(job)


def field_changes(old: Job, new: Job) -> list[FieldChange]:
    """The fields whose value differs between two definitions of a job, in path order."""
    before, after = _flat(comparable(old)), _flat(comparable(new))
    return [
        FieldChange(path, before.get(path, ABSENT), after.get(path, ABSENT))
        for path in sorted(before.keys() | after.keys())
        if before.get(path, ABSENT) != after.get(path, ABSENT)
    ]


def file_form(job: Job) -> dict[str, Any]:
    """A job as a file would write it: secrets masked, without the store's version."""
    d = redacted(job)
    d.pop("version", None)
    return d


def comparable(job: Job) -> dict[str, Any]:
    """``file_form`` as a plan compares an existing job: without its paused state, which PutJobs keeps."""
    d = file_form(job)
    d.pop("paused", None)
    return d


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted paths; a list stays one value (its order is part of it)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping):  # an empty table adds nothing: no labels is no labels
            out.update(_flat(v, path + "."))
        else:
            out[path] = v
    return out


def with_source(job: Job, source: str) -> Job:
    """``job`` with the ``SOURCE_LABEL`` label naming ``source``, unless the job sets that label itself
    (its own value is kept). ``InvalidJob`` (``labels``) when the label breaks the label rules: one label
    too many, or a ``source`` too long or not printable."""
    if SOURCE_LABEL in job.labels:
        return job
    labelled = replace(job, labels={**job.labels, SOURCE_LABEL: source})
    job_from_dict(job_to_dict(labelled))  # the label rules, in the one place that holds them
    return labelled


__all__ = [
    "ABSENT",
    "FieldChange",
    "JobChange",
    "Plan",
    "SECRET_CHANGED",
    "SECRET_VALUES",
    "SOURCE_LABEL",
    "comparable",
    "field_changes",
    "file_form",
    "has_secrets",
    "plan",
    "with_secret_checks",
    "with_source",
]
