"""Per-namespace quotas, and the pure checks that refuse what would cross one.

A namespace's ``Quota`` (None: no limit):

- ``max_jobs``: the jobs it holds; checked on put.
- ``max_slots_per_second``: the sum of its jobs' rates; checked on put. A job's
  rate is its peak, one slot per the schedule's shortest gap
  (``jobspec.shortest_gap_ms``, the gap the cluster's minimum interval and jitter
  already use): a cron that fires every second during office hours counts 1/s,
  a one-off job 0. Rates are exact fractions, so ten jobs every 3 s sum to
  exactly 10/3 and a sum at the limit is at it, not a float's rounding above it.
- ``max_running``: executions of its jobs running at once on a node; checked
  before each start. A refused start is not dropped: it stays waiting (the fair
  queue) and is still owed.

A change is refused only when it ends over a limit AND grows what it is checked
against, so a lowered quota never blocks replacing a job with a slower one,
deleting one, or finishing a run. A refusal (``QuotaExceeded``) names the quota,
the namespace, the limit and the would-be value: its ``reason`` is what the API
sends with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from shardcron.errors import InvalidJob
from shardcron.model import Schedule
from shardcron.spec.schedule import shortest_gap_ms

QUOTA_KEYS = ("max_jobs", "max_slots_per_second", "max_running")


class InvalidQuota(InvalidJob):
    """A quota setting is malformed; an ``InvalidJob`` too, so the API says INVALID_ARGUMENT naming the field."""


@dataclass(frozen=True)
class Quota:
    max_jobs: int | None = None
    max_slots_per_second: Fraction | None = None
    max_running: int | None = None


@dataclass(frozen=True)
class Usage:
    """What a namespace holds now: its jobs, the sum of their rates, its running executions."""

    jobs: int = 0
    slots_per_second: Fraction = Fraction(0)
    running: int = 0


@dataclass(frozen=True)
class PutChange:
    """One job put: the rate of the job it replaces (None: a new job) and its own."""

    old_rate: Fraction | None
    new_rate: Fraction


@dataclass(frozen=True)
class QuotaExceeded:
    quota: str  # one of QUOTA_KEYS
    namespace: str
    limit: int | Fraction
    would_be: int | Fraction

    @property
    def reason(self) -> str:
        what = {
            "max_jobs": "hold {} jobs",
            "max_slots_per_second": "admit {} slots per second",
            "max_running": "run {} executions at once",
        }[self.quota]
        return (
            f"namespace {self.namespace!r} would {what.format(_number(self.would_be))}; its quota "
            f"{self.quota} is {_number(self.limit)}"
        )


def job_rate(schedule: Schedule) -> Fraction:
    """The job's peak rate in slots per second: 1 / its shortest gap; 0 for a single run."""
    gap = shortest_gap_ms(schedule)
    return Fraction(0) if gap is None else Fraction(1000, gap)


def usage_after(usage: Usage, change: PutChange) -> Usage:
    added = 1 if change.old_rate is None else 0
    rate = usage.slots_per_second + change.new_rate - (change.old_rate or 0)
    return Usage(usage.jobs + added, rate, usage.running)


def check_put(namespace: str, quota: Quota, usage: Usage, change: PutChange) -> QuotaExceeded | None:
    """None when the put fits ``quota``, else the first limit it would cross (jobs, then rate)."""
    after = usage_after(usage, change)
    return _crossed("max_jobs", namespace, quota.max_jobs, usage.jobs, after.jobs) or _crossed(
        "max_slots_per_second", namespace, quota.max_slots_per_second, usage.slots_per_second, after.slots_per_second
    )


def admit_in_order(
    namespace: str, quota: Quota, usage: Usage, changes: Iterable[PutChange]
) -> list[QuotaExceeded | None]:
    """PutJobs: each put, in order, is admitted while it fits what the ones admitted before it left."""
    results: list[QuotaExceeded | None] = []
    for change in changes:
        refused = check_put(namespace, quota, usage, change)
        if refused is None:
            usage = usage_after(usage, change)
        results.append(refused)
    return results


def check_start(namespace: str, quota: Quota, running: int) -> QuotaExceeded | None:
    """None when one more execution of the namespace may start beside its ``running`` ones."""
    return _crossed("max_running", namespace, quota.max_running, running, running + 1)


def _crossed(
    name: str, namespace: str, limit: int | Fraction | None, before: int | Fraction, after: int | Fraction
) -> QuotaExceeded | None:
    if limit is None or after <= limit or after <= before:
        return None
    return QuotaExceeded(name, namespace, limit, after)


def parse_quota(raw: Mapping[str, object], where: str = "quota") -> Quota:
    """A quota from a mapping (a namespace's settings); absent keys are no limit.

    ``max_jobs`` and ``max_running`` are whole numbers of at least 0;
    ``max_slots_per_second`` a number of at least 0, kept exact (``"0.5"``, ``2.5``, ``10``).
    """
    unknown = sorted(set(raw) - set(QUOTA_KEYS))
    if unknown:
        raise InvalidQuota(f"{where}.{unknown[0]}", f"is not a quota; the quotas are {', '.join(QUOTA_KEYS)}")
    rate = raw.get("max_slots_per_second")
    return Quota(
        _count(raw.get("max_jobs"), f"{where}.max_jobs"),
        None if rate is None else _rate(rate, f"{where}.max_slots_per_second"),
        _count(raw.get("max_running"), f"{where}.max_running"),
    )


def _count(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidQuota(field, f"must be a whole number of at least 0, got {value!r}")
    return value


def _rate(value: object, field: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidQuota(field, f"must be a number of at least 0, got {value!r}")
    try:
        rate = Fraction(str(value))  # str: 0.1 is one tenth, not the float nearest it
    except ValueError:
        raise InvalidQuota(field, f"must be a number of at least 0, got {value!r}") from None
    if rate < 0:
        raise InvalidQuota(field, f"must be a number of at least 0, got {value!r}")
    return rate


def _number(x: int | Fraction) -> str:
    if isinstance(x, Fraction) and x.denominator != 1:
        return f"{float(x):.6g}"
    return str(int(x))


__all__ = [
    "QUOTA_KEYS",
    "InvalidQuota",
    "PutChange",
    "Quota",
    "QuotaExceeded",
    "Usage",
    "admit_in_order",
    "check_put",
    "check_start",
    "job_rate",
    "parse_quota",
    "usage_after",
]
