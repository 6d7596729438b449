"""``shardcron audit`` and ``shardcron db upgrade|current``: commands that read or migrate the store.

``register(subparsers)`` adds them, and ``db prune`` (``cli/prune.py``), to the ``shardcron`` parser
(cli.build_parser).
Expected failures are ``ShardcronError``s, which ``cli.main`` prints as one line
with exit status 1. ``audit`` exits 0 when the store is clean and 2 when it
finds anything.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from tabulate import tabulate

from shardcron import audit, clock
from shardcron.cli import prune
from shardcron.cli.args import seconds, whole
from shardcron.cli.common import open_etcd, parse_time_ms
from shardcron.cli.flags import add_db_flag, add_etcd_security_flags, add_prefix_flag, etcd_security
from shardcron.cli.store import describe_revision, open_store, require_head, statement_errors
from shardcron.clock import rfc3339_ms
from shardcron.errors import ConfigError
from shardcron.jobkey import display_key
from shardcron.rules.retention import PruneState
from shardcron.spec.bounds import MAX_DURATION_MS
from shardcron.spec.namespaces import store_key, validate_namespace
from shardcron.store.engine import describe_url
from shardcron.store.migrate import current_revision, upgrade

if TYPE_CHECKING:
    from shardcron.coordination.etcd import EtcdSecurity

EXIT_CLEAN = 0
EXIT_FINDINGS = 2

DEFAULT_WINDOW_MS = 3_600_000
# Slots this close to now may not be recorded yet (a shard changing leader
# catches up within its lease TTL): the default window ends this long ago.
DEFAULT_MARGIN_S = 30.0
DEFAULT_SHOWN = 20  # findings of each kind in the text report
MAX_SHOWN = 1_000_000  # --limit: more lines than anyone reads; --json prints all
_JOB_ROWS = 50  # per-job lines in the text report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``audit`` and ``db`` to the ``shardcron`` command."""
    p = subparsers.add_parser(
        "audit",
        help="check the tick store: one row per owed slot, current fences, nothing left unresolved",
        description="Check every job's slots in a time window against the tick store. "
        "Exit status: 0 clean, 2 findings, 1 error.",
    )
    add_db_flag(p)
    p.add_argument(
        "--from",
        dest="from_",
        metavar="TIME",
        help="window start, exclusive: ISO-8601 or epoch ms (default: one hour before --to)",
    )
    p.add_argument(
        "--to", metavar="TIME", help="window end, inclusive: ISO-8601 or epoch ms (default: now minus --margin)"
    )
    p.add_argument(
        "--margin",
        type=seconds(zero=True),
        default=DEFAULT_MARGIN_S,
        metavar="SECONDS",
        help="default --to is this long before now (default %(default)s)",
    )
    p.add_argument("--job", metavar="ID", help="audit this job only (of --namespace)")
    p.add_argument(
        "-n",
        "--namespace",
        metavar="NAME",
        help="audit this namespace's jobs only (default: every namespace; with --job: default)",
    )
    p.add_argument(
        "--grace",
        type=seconds(zero=True),
        default=audit.DEFAULT_GRACE_MS / 1000,
        metavar="SECONDS",
        help="a tick still claimed/running this long after its slot is unresolved (default %(default)s)",
    )
    p.add_argument(
        "--clock-tolerance-ms",
        type=whole(0, MAX_DURATION_MS),
        default=audit.DEFAULT_CLOCK_TOLERANCE_MS,
        metavar="MS",
        help="allowed wall-clock skew between nodes when comparing claim/start times with "
        "fence raises (default %(default)s)",
    )
    _add_etcd_flags(p)
    p.add_argument(
        "--limit",
        type=whole(0, MAX_SHOWN),
        default=DEFAULT_SHOWN,
        metavar="N",
        help="findings of each kind to print (default %(default)s; --json prints all)",
    )
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.set_defaults(func=cmd_audit)

    db = subparsers.add_parser("db", help="the store: upgrade and current (its schema), prune (old ticks)")
    db_sub = db.add_subparsers(dest="db_command", metavar="COMMAND")
    db_sub.required = True
    up = db_sub.add_parser("upgrade", help="bring the database's schema to this shardcron's (creates it if empty)")
    add_db_flag(up)
    up.set_defaults(func=cmd_db_upgrade)
    cur = db_sub.add_parser("current", help="print the database's schema revision")
    add_db_flag(cur)
    cur.set_defaults(func=cmd_db_current)
    prune.register(db_sub)


def _add_etcd_flags(p: argparse.ArgumentParser) -> None:
    # Not flags.add_common_etcd_flags: there --etcd always has a value, and the
    # audit must not need etcd unless asked to consult it.
    g = p.add_argument_group("leaders", "consult etcd so that unresolved ticks on led shards are left to their leader")
    g.add_argument(
        "--etcd",
        default=None,
        metavar="ENDPOINTS",
        help="comma-separated etcd endpoints, https:// for TLS (default: do not consult etcd, "
        "and report every old unresolved tick)",
    )
    add_prefix_flag(g)
    add_etcd_security_flags(g)


# -- shardcron audit ---------------------------------------------------------------------


def _audited_job(a: argparse.Namespace) -> str | None:
    """--job's key: the job in --namespace (default: default)."""
    return None if a.job is None else store_key(a.namespace, a.job, "--job")


def cmd_audit(a: argparse.Namespace) -> int:
    now = clock.wall_ms()
    to_ms = parse_time_ms(a.to, "--to") if a.to else now - round(a.margin * 1000)
    from_ms = parse_time_ms(a.from_, "--from") if a.from_ else to_ms - DEFAULT_WINDOW_MS
    if from_ms >= to_ms:
        raise ConfigError(
            f"the audit window is empty: --from {rfc3339_ms(from_ms)} is not before --to {rfc3339_ms(to_ms)}"
        )
    live = etcd_live_leaders(a.etcd, a.prefix, etcd_security(a)) if a.etcd else None
    engine = open_store(a.db, create=False)
    try:
        require_head(engine, describe_url(a.db))
        report = audit.run_audit(
            engine,
            from_ms=from_ms,
            to_ms=to_ms,
            job_id=_audited_job(a),
            now_ms=now,
            live_leaders=live,
            namespaces=None if a.namespace is None else frozenset({validate_namespace(a.namespace, "--namespace")}),
            grace_ms=round(a.grace * 1000),
            clock_tolerance_ms=a.clock_tolerance_ms,
        )
    finally:
        engine.dispose()
    if a.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report, shown=a.limit))
    return EXIT_CLEAN if report.clean() else EXIT_FINDINGS


def etcd_live_leaders(endpoints: str, prefix: str, security: EtcdSecurity | None = None) -> Callable[[int], bool]:
    """shard -> whether a leader holds it now, from one read of etcd (what ``shardcron shards`` shows)."""
    from shardcron.coordination.keys import KeyLayout  # loaded by this command only (see cli/__init__.py)
    from shardcron.coordination.view import read_view  # loaded by this command only (see cli/__init__.py)

    try:
        layout = KeyLayout(prefix)
    except ValueError as e:
        raise ConfigError(f"--prefix: {e}") from None
    with open_etcd(argparse.Namespace(), endpoints=endpoints, security=security) as etcd:
        view = read_view(etcd, layout)
    led = frozenset(
        shard for shard in view.candidates if (leader := view.leader(shard)) is not None and leader.leader_since_ms
    )
    return led.__contains__


def format_report(r: audit.AuditReport, *, shown: int = DEFAULT_SHOWN) -> str:
    lines = [
        f"audit of slots after {rfc3339_ms(r.from_ms)} up to {rfc3339_ms(r.to_ms)}: "
        f"{_n(len(r.per_job), 'job')}, {_n(r.slots_checked, 'slot')}, {_n(r.ticks_checked, 'tick')}"
        + (f", {r.excused} missed beyond their catch-up window (excused)" if r.excused else "")
        + (f", {r.calendar_excluded} excluded by calendars (not owed)" if r.calendar_excluded else "")
        + (f", {r.pruned} pruned by retention (below the recorded horizon, not missing)" if r.pruned else "")
        + (
            f", {backfilled} added by backfills"
            if (backfilled := sum(s.backfilled for s in r.per_job.values()))
            else ""
        )
    ]
    if r.retention is not PruneState.INTACT:
        lines.append(
            f"retention: this window is {r.retention.value}; slots below each job's horizon were deleted on purpose"
        )
    jobs = sorted(r.per_job.values(), key=lambda s: (s.findings == 0, s.job_id))
    if jobs:
        table = [
            [
                display_key(s.job_id),
                s.state,
                s.slots_checked,
                s.ticks,
                s.missing,
                s.excused,
                s.duplicates,
                s.stale_fence,
                s.unresolved,
                s.false_overlap,
            ]
            for s in jobs[:_JOB_ROWS]
        ]
        lines += [
            "",
            tabulate(
                table,
                headers=[
                    "JOB",
                    "STATE",
                    "SLOTS",
                    "TICKS",
                    "MISSING",
                    "EXCUSED",
                    "DUPLICATES",
                    "STALE FENCE",
                    "UNRESOLVED",
                    "FALSE OVERLAP",
                ],
                tablefmt="plain",
            ),
        ]
        if len(jobs) > _JOB_ROWS:
            rest = jobs[_JOB_ROWS:]
            bad = sum(1 for s in rest if s.findings)
            lines.append(f"…and {len(rest)} more jobs" + (f" ({bad} with findings)" if bad else ", all clean"))
    titles = {
        audit.FindingKind.MISSING: "missing slots (no tick row)",
        audit.FindingKind.DUPLICATE: "duplicate slots (more than one row: the schema is broken)",
        audit.FindingKind.STALE_FENCE: "stale fences (written by a deposed leader)",
        audit.FindingKind.UNRESOLVED: "unresolved ticks",
        audit.FindingKind.FALSE_OVERLAP: "overlap skips with no started run going (the job silently stopped)",
        audit.FindingKind.NOTIFICATION_MISSING: "failed slots, recoveries or missed deadlines whose notification "
        "is owed and missing",
        audit.FindingKind.DEADLINE_UNRAISED: "deadlines missed and not recorded missed (no alert was raised)",
    }
    for kind, title in titles.items():
        found = r.findings()[kind]
        if not found:
            continue
        lines += ["", f"{title}: {len(found)}"]
        if shown and kind in (
            audit.FindingKind.MISSING,
            audit.FindingKind.NOTIFICATION_MISSING,
            audit.FindingKind.DEADLINE_UNRAISED,
        ):  # no row to show
            table = [["", display_key(f.job_id), rfc3339_ms(f.scheduled_at_ms), f.detail] for f in found[:shown]]
            lines.append(tabulate(table, headers=["", "JOB", "SLOT", "WHAT"], tablefmt="plain", disable_numparse=True))
        elif shown:
            table = [
                [
                    "",
                    display_key(f.job_id),
                    rfc3339_ms(f.scheduled_at_ms),
                    f.shard,
                    f.fence,
                    f.node_id,
                    f.status,
                    f.detail,
                ]
                for f in found[:shown]
            ]
            lines.append(
                tabulate(
                    table,
                    headers=["", "JOB", "SLOT", "SHARD", "FENCE", "NODE", "STATUS", "DETAIL"],
                    tablefmt="plain",
                    disable_numparse=True,
                )
            )
        if len(found) > shown:
            lines.append(f"    …and {len(found) - shown} more")
    if r.deadlines_missed:
        lines += ["", f"deadlines missed (recorded and alerted; not findings): {len(r.deadlines_missed)}"]
        if shown:
            table = [
                ["", display_key(m.job_id), rfc3339_ms(m.scheduled_at_ms), m.kind] for m in r.deadlines_missed[:shown]
            ]
            lines.append(
                tabulate(table, headers=["", "JOB", "SLOT", "DEADLINE"], tablefmt="plain", disable_numparse=True)
            )
        if len(r.deadlines_missed) > shown:
            lines.append(f"    …and {len(r.deadlines_missed) - shown} more")
    lines.append("")
    if r.clean():
        lines.append("clean")
    else:
        counts = [f"{len(v)} {k.value.replace('_', ' ')}" for k, v in r.findings().items() if v]
        lines.append("FOUND: " + ", ".join(counts))
    return "\n".join(lines)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# -- shardcron db ------------------------------------------------------------------------


def cmd_db_upgrade(a: argparse.Namespace) -> int:
    engine = open_store(a.db, create=True)
    try:
        with statement_errors(engine):
            before = current_revision(engine)
            upgrade(engine)
            after = current_revision(engine)
    finally:
        engine.dispose()
    where = describe_url(a.db)
    if before == after:
        print(f"{where}: already at {describe_revision(after)}; nothing to do")
    else:
        print(f"{where}: upgraded from {describe_revision(before)} to {describe_revision(after)}")
    return 0


def cmd_db_current(a: argparse.Namespace) -> int:
    engine = open_store(a.db, create=False)
    try:
        with statement_errors(engine):
            rev = current_revision(engine)
    finally:
        engine.dispose()
    print(describe_revision(rev))
    return 0


__all__ = [
    "EXIT_CLEAN",
    "EXIT_FINDINGS",
    "cmd_audit",
    "cmd_db_current",
    "cmd_db_upgrade",
    "etcd_live_leaders",
    "format_report",
    "register",
]
