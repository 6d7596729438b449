"""``shardcron namespaces list | create NAME | update NAME | describe NAME | delete NAME [--force]``.

Quotas are given as flags: ``--max-jobs N``, ``--max-slots-per-second R`` (a
decimal or a fraction: ``2.5``, ``10/3``), ``--max-running N``; ``none`` removes a
limit (on ``update``; on ``create`` it is the default). ``--weight W`` is the
namespace's share of a saturated node's executors (default 1).
"""

from __future__ import annotations

import argparse
import re
import sys
from fractions import Fraction

from shardcron.cli.common import add_api_flags, api_client, fmt_ms, print_json, table
from shardcron.errors import ShardcronError
from shardcron.rules.namespace_settings import StoredNamespace
from shardcron.spec.bounds import INT64_MAX, shown

NO_LIMIT = "none"
# flag -> the quota it sets (tenancy.quotas.QUOTA_KEYS)
QUOTA_FLAGS = {
    "max_jobs": "--max-jobs",
    "max_slots_per_second": "--max-slots-per-second",
    "max_running": "--max-running",
}


# A rate as a decimal or a fraction of whole numbers, each part within int64's 18 safe digits.
_RATE = re.compile(r"\d{1,18}(\.\d{1,18})?|\d{1,18}/\d{1,18}")


class NamespaceFlagError(ShardcronError):
    pass


def parse_count(text: str, flag: str) -> int | None:
    """A whole number from 0 to the API's int64 limit, or ``none`` (no limit)."""
    if text.strip().lower() == NO_LIMIT:
        return None
    try:
        value = int(text)
    except ValueError:  # also past int()'s 4300 digits
        value = -1
    if not 0 <= value <= INT64_MAX:
        raise NamespaceFlagError(
            f"{flag}: must be a whole number of at least 0 or '{NO_LIMIT}' (at most {INT64_MAX}), got {shown(text)}"
        )
    return value


def parse_rate(text: str, flag: str) -> Fraction | None:
    """A number of at least 0 kept exact (``2.5``, ``10/3``), or ``none`` (no limit)."""
    if text.strip().lower() == NO_LIMIT:
        return None
    value = Fraction(-1)
    # Plain digits only: Fraction("1e999999999") would build a billion-digit integer first.
    if _RATE.fullmatch(text.strip()):
        try:
            value = Fraction(text.strip())
        except ZeroDivisionError:
            pass
    if value < 0:
        raise NamespaceFlagError(
            f"{flag}: must be a number of at least 0 (e.g. 2.5 or 10/3) or '{NO_LIMIT}', got {shown(text)}"
        )
    return value


def parse_weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise NamespaceFlagError(f"--weight: must be a number above 0, got {shown(text)}")
    return value


def quota_flags(a: argparse.Namespace) -> dict[str, int | Fraction | None]:
    """The quotas the flags name (a flag not given is not in the answer)."""
    out: dict[str, int | Fraction | None] = {}
    for key, flag in QUOTA_FLAGS.items():
        raw = getattr(a, key)
        if raw is not None:
            out[key] = parse_rate(raw, flag) if key == "max_slots_per_second" else parse_count(raw, flag)
    return out


def fmt_rate(x: Fraction | None) -> str:
    """An exact rate for people: ``3``, ``0.5``, ``3.333 (10/3)``; ``-`` for no limit."""
    if x is None:
        return "-"
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    as_decimal = f"{float(x):.4g}"
    return as_decimal if Fraction(as_decimal) == x else f"{as_decimal} ({x})"


def _limit(x: int | None) -> str:
    return "-" if x is None else str(x)


def namespace_json(n: StoredNamespace) -> dict:
    q = n.settings.quota
    return {
        "name": n.name,
        "weight": n.settings.weight,
        "quota": {
            "max_jobs": q.max_jobs,
            "max_running": q.max_running,
            "max_slots_per_second": None if q.max_slots_per_second is None else str(q.max_slots_per_second),
        },
        "usage": {"jobs": n.usage.jobs, "slots_per_second": str(n.usage.slots_per_second)},
        "created_at_ms": n.created_at_ms,
        "updated_at_ms": n.updated_at_ms,
    }


HEADERS = ["NAME", "WEIGHT", "JOBS", "MAX JOBS", "SLOTS/S", "MAX SLOTS/S", "MAX RUNNING"]


def _row(n: StoredNamespace) -> list:
    q = n.settings.quota
    return [
        n.name,
        f"{n.settings.weight:g}",
        n.usage.jobs,
        _limit(q.max_jobs),
        fmt_rate(n.usage.slots_per_second),
        fmt_rate(q.max_slots_per_second),
        _limit(q.max_running),
    ]


def describe(n: StoredNamespace) -> str:
    q = n.settings.quota
    max_jobs = "no limit" if q.max_jobs is None else str(q.max_jobs)
    max_rate = "no limit" if q.max_slots_per_second is None else fmt_rate(q.max_slots_per_second)
    lines = [
        ("namespace", n.name),
        ("weight", f"{n.settings.weight:g}"),
        ("jobs", f"{n.usage.jobs} of {max_jobs}"),
        ("slots per second", f"{fmt_rate(n.usage.slots_per_second)} of {max_rate}"),
        ("max running", f"{q.max_running} per node" if q.max_running is not None else "no limit"),
        ("created", fmt_ms(n.created_at_ms)),
        ("updated", fmt_ms(n.updated_at_ms)),
    ]
    return "\n".join(f"{k:<17} {v}" for k, v in lines)


def cmd_list(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        found = c.list_namespaces()
    if a.json:
        print_json([namespace_json(n) for n in found])
    elif found:
        print(table([_row(n) for n in found], HEADERS))
    else:
        print("no namespaces", file=sys.stderr)
    return 0


def cmd_create(a: argparse.Namespace) -> int:
    weight = parse_weight(a.weight) if a.weight is not None else None
    quota = quota_flags(a)
    with api_client(a) as c:
        n = c.create_namespace(a.name, weight=weight, quota=quota)
    print_json(namespace_json(n)) if a.json else print(f"namespace {n.name} created")
    return 0


def cmd_update(a: argparse.Namespace) -> int:
    weight = parse_weight(a.weight) if a.weight is not None else None
    quota = quota_flags(a)
    if weight is None and not quota:
        raise NamespaceFlagError(
            "nothing to change: give --weight or a quota flag (" + ", ".join(QUOTA_FLAGS.values()) + ")"
        )
    with api_client(a) as c:
        n = c.update_namespace(a.name, weight=weight, quota=quota)
    print_json(namespace_json(n)) if a.json else print(describe(n))
    return 0


def cmd_describe(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        n = c.get_namespace(a.name)
    print_json(namespace_json(n)) if a.json else print(describe(n))
    return 0


def cmd_delete(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        gone = c.delete_namespace(a.name, force=a.force)
    if a.json:
        print_json({"name": a.name, "deleted": True, "jobs_deleted": gone})
    else:
        print(f"namespace {a.name} deleted" + (f" with its {gone} job{'s' if gone != 1 else ''}" if gone else ""))
    return 0


def _settings_flags(p: argparse.ArgumentParser, *, update: bool) -> None:
    none = f"; '{NO_LIMIT}' removes the limit" if update else ""
    p.add_argument("--weight", metavar="W", help="its share of a saturated node's executors (default 1)")
    p.add_argument("--max-jobs", dest="max_jobs", metavar="N", help=f"the jobs it may hold{none}")
    p.add_argument(
        "--max-slots-per-second",
        dest="max_slots_per_second",
        metavar="R",
        help=f"the sum of its jobs' peak rates, e.g. 2.5 or 10/3{none}",
    )
    p.add_argument(
        "--max-running", dest="max_running", metavar="N", help=f"its executions running at once on a node{none}"
    )


def register(subparsers) -> None:
    top = subparsers.add_parser("namespaces", help="namespaces: their weights, quotas and usage")
    sub = top.add_subparsers(dest="namespaces_command", metavar="COMMAND")
    sub.required = True

    ls = sub.add_parser("list", help="list the namespaces with their usage and quotas")
    ls.set_defaults(func=cmd_list)

    create = sub.add_parser("create", help="create a namespace")
    create.add_argument("name", metavar="NAME")
    _settings_flags(create, update=False)
    create.set_defaults(func=cmd_create)

    update = sub.add_parser("update", help="change a namespace's weight or quotas (the ones given)")
    update.add_argument("name", metavar="NAME")
    _settings_flags(update, update=True)
    update.set_defaults(func=cmd_update)

    desc = sub.add_parser("describe", help="show a namespace's settings and usage")
    desc.add_argument("name", metavar="NAME")
    desc.set_defaults(func=cmd_describe)

    delete = sub.add_parser("delete", help="delete a namespace (refused while it holds jobs, unless --force)")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--force", action="store_true", help="delete its jobs with it")
    delete.set_defaults(func=cmd_delete)
    for p in (ls, create, update, desc, delete):
        add_api_flags(p)
