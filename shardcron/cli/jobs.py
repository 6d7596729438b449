"""``shardcron jobs ...``: create, inspect and change jobs through the API.

Every command takes ``--server host:port`` (repeatable; default
``$SHARDCRON_SERVER`` or 127.0.0.1:7070) and ``--json``. Human output is a
plain table; ``--json`` is for scripts. Failures are ``ShardcronError``s,
which ``cli.main`` prints as one line before exiting with status 1 (``jobs diff``:
2, see ``file_apply``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from shardcron.cli import backfill, file_apply
from shardcron.cli.args import MAX_SHARD, whole
from shardcron.cli.common import add_api_command, api_client, fmt_ms, parse_time_ms, print_json
from shardcron.cli.job_flags import add_put_flags, job_from_flags, pairs
from shardcron.cli.output import job_json, jobs_table, runs_json
from shardcron.errors import ConfigError, job_named
from shardcron.jobkey import split_key
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.sharding import shard_for

if TYPE_CHECKING:
    from shardcron.client.client import Client


def listed_namespace(a: argparse.Namespace) -> str | None:
    """``*`` with --all-namespaces (-A), else None: the client's namespace (-n)."""
    if getattr(a, "all_namespaces", False):
        if getattr(a, "namespace", None):
            raise ConfigError("--all-namespaces and --namespace: give one of them")
        return ALL_NAMESPACES
    return None


def shard_of(client: Client, job_ids: list[str]) -> dict[str, int | None]:
    """job id -> shard, from the cluster's shard count (one GetShards call)."""
    n = client.shards().get("shard_count")
    return {j: shard_for(j, n) for j in job_ids} if n else {}


# -- commands ---------------------------------------------------------------------------


def cmd_put(a: argparse.Namespace) -> int:
    job = job_from_flags(a)
    with api_client(a) as c:
        stored = c.put_job(job, expected_version=a.expected_version)
        shard = shard_of(c, [stored.id]).get(stored.id)
    if a.json:
        print_json(job_json(stored, shard))
    else:
        verb = "created" if stored.version == 1 else "updated"
        print(f"{job_named(stored.id)} {verb} (version {stored.version}, shard {shard})")
    return 0


def cmd_get(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        job, runs = c.get_job_runs(a.id)
        shard = shard_of(c, [job.id]).get(job.id)
    if a.json:
        print_json({**job_json(job, shard), "runs": runs_json(runs)})
    else:
        print(jobs_table([(job, runs)], {job.id: shard}))
        if job.calendars:
            print(f"calendars: {', '.join(job.calendars)}")
        if runs.next_reason:
            print(f"next: {runs.next_reason}")
    return 0


def cmd_delete(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        c.delete_job(a.id)
    if a.json:
        print_json({"id": a.id, "deleted": True})
    else:
        print(f"{job_named(a.id)} deleted")
    return 0


def _cmd_pause(a: argparse.Namespace, paused: bool) -> int:
    with api_client(a) as c:
        job = c.pause_job(a.id) if paused else c.resume_job(a.id)
    if a.json:
        print_json(job_json(job))
    else:
        print(f"{job_named(job.id)} {'paused' if paused else 'resumed'} (version {job.version})")
    return 0


def cmd_pause(a: argparse.Namespace) -> int:
    return _cmd_pause(a, True)


def cmd_resume(a: argparse.Namespace) -> int:
    return _cmd_pause(a, False)


def cmd_trigger(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        slot = c.trigger_job(a.id)
    key = split_key(slot.job_id)
    if a.json:
        print_json({"id": key.id, "namespace": key.namespace, "scheduled_at_ms": slot.scheduled_at_ms})
    else:
        print(f"{job_named(slot.job_id)} triggered: tick {fmt_ms(slot.scheduled_at_ms)}")
    return 0


def cmd_ack(a: argparse.Namespace) -> int:
    slot_ms = None if a.slot is None else parse_time_ms(a.slot, "SLOT")
    with api_client(a) as c:
        acked = c.ack_tick(a.id, slot_ms)
    key = split_key(acked.slot.job_id)
    if a.json:
        print_json(
            {
                "id": key.id,
                "namespace": key.namespace,
                "scheduled_at_ms": acked.slot.scheduled_at_ms,
                "acked_at_ms": acked.acked_at_ms,
                "already": acked.already,
            }
        )
    else:
        when = "already acked at" if acked.already else "acked at"
        print(
            f"{job_named(acked.slot.job_id)} slot {fmt_ms(acked.slot.scheduled_at_ms)} {when} {fmt_ms(acked.acked_at_ms)}"
        )
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    labels = dict(pairs(a.label, "=", "--label"))
    namespace = listed_namespace(a)
    with api_client(a) as c:
        listed = list(c.list_jobs_runs(labels=labels, shard=a.shard, namespace=namespace))
        jobs = [j for j, _ in listed]
        shards = shard_of(c, [j.id for j in jobs]) if jobs else {}
    if a.json:
        print_json([{**job_json(j, shards.get(j.id)), "runs": runs_json(r)} for j, r in listed])
    elif jobs and namespace:  # every namespace: each row says whose
        print(jobs_table(listed, shards, namespaced=True))
    elif jobs:
        print(jobs_table(listed, shards))
    else:
        print("no jobs", file=sys.stderr)
    return 0


# -- the parser ---------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``jobs`` to the ``shardcron`` command (called by ``cli.build_parser``)."""
    jobs = subparsers.add_parser("jobs", help="create, inspect and change jobs through the API")
    sub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND")
    sub.required = True

    add_put_flags(add_api_command(sub, "put", cmd_put, "create or replace a job"))
    add_api_command(sub, "get", cmd_get, "show a job")
    add_api_command(sub, "delete", cmd_delete, "delete a job (its ticks stay, as history)")
    add_api_command(sub, "pause", cmd_pause, "pause a job")
    add_api_command(sub, "resume", cmd_resume, "resume a paused job (the paused time is not owed)")
    add_api_command(sub, "trigger", cmd_trigger, "run a job now, as an extra tick")
    ack = add_api_command(sub, "ack", cmd_ack, "report a slot's work done (its heartbeat and deadline count it)")
    ack.add_argument(
        "slot",
        nargs="?",
        metavar="SLOT",
        help="the slot: ISO-8601 or epoch ms (default: the job's newest slot at or before now that has a tick)",
    )
    backfill.register(sub)

    ls = add_api_command(sub, "list", cmd_list, "list jobs", with_id=False)
    ls.add_argument("--label", action="append", metavar="K=V", help="only jobs with this label; repeatable")
    ls.add_argument("--shard", type=whole(0, MAX_SHARD - 1), metavar="K", help="only shard K's jobs")
    ls.add_argument("-A", "--all-namespaces", action="store_true", help="jobs of every namespace the token may read")
    file_apply.register(sub)


__all__ = [
    "cmd_ack",
    "cmd_delete",
    "cmd_get",
    "cmd_list",
    "cmd_pause",
    "cmd_put",
    "cmd_resume",
    "cmd_trigger",
    "register",
]
