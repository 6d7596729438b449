"""``shardcron jobs backfill JOB --from T --to T`` and ``jobs backfills``: backfills through the API.

The backfill runs on the cluster (the leader of the job's shard, then its
successor); the command only asks for it and, with ``--wait``, follows its
progress until it ends. Bad options are refused here when they can be
(``--rate``, ``--overlap``, a reversed range), naming the option; what needs the
job (too many slots in the range, an unknown job) the server refuses.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from shardcron import clock
from shardcron.cli.common import add_api_command, api_client, fmt_clock_ms, fmt_ms, parse_time_ms, print_json, table
from shardcron.errors import job_named
from shardcron.jobkey import display_key, split_key
from shardcron.model import Backfill, BackfillState
from shardcron.rules.backfill_plan import BackfillError, parse_overlap, parse_rate

if TYPE_CHECKING:
    from shardcron.client.client import Client

WAIT_POLL_S = 1.0
DEFAULT_RATE = "10/s"


def backfill_json(bf: Backfill) -> dict[str, Any]:
    key = split_key(bf.job_id)
    return {
        "id": bf.id,
        "job_id": key.id,
        "namespace": key.namespace,
        "shard": bf.shard,
        "from_ms": bf.from_ms,
        "to_ms": bf.to_ms,
        "from": fmt_ms(bf.from_ms),
        "to": fmt_ms(bf.to_ms),
        "overlap": bf.overlap.value,
        "rate_per_s": bf.rate_per_s,
        "state": bf.state.value,
        "planned": bf.planned,
        "done": bf.done,
        "skipped": bf.skipped,
        "cursor_ms": bf.cursor_ms,
        "created_at_ms": bf.created_at_ms,
        "updated_at_ms": bf.updated_at_ms,
        "node_id": bf.node_id,
        "error": bf.error,
    }


def progress_line(bf: Backfill) -> str:
    line = f"{bf.state.value}: {bf.done} of {bf.planned} slots done, {bf.skipped} skipped"
    return f"{line}: {bf.error}" if bf.error else line


def describe(bf: Backfill) -> str:
    return (
        f"backfill {bf.id} of {job_named(bf.job_id)} (shard {bf.shard}): {fmt_ms(bf.from_ms)} .. {fmt_ms(bf.to_ms)}, "
        f"overlap {bf.overlap.value}, {bf.rate_per_s:g}/s\n  {progress_line(bf)}"
    )


def cmd_backfill(a: argparse.Namespace) -> int:
    from_ms, to_ms = parse_time_ms(a.from_, "--from"), parse_time_ms(a.to, "--to")
    if from_ms >= to_ms:
        raise BackfillError("--to", f"must be after --from ({fmt_ms(to_ms)} is not after {fmt_ms(from_ms)})")
    rate, overlap = parse_rate(a.rate), parse_overlap(a.overlap)
    with api_client(a) as c:
        bf = c.backfill_job(a.id, from_ms, to_ms, rate_per_s=rate, overlap=overlap.value)
        if not a.json:
            print(describe(bf), flush=True)
        if a.wait:
            bf = _follow(c, bf, quiet=a.json)
    if a.json:
        print_json(backfill_json(bf))
    return 1 if bf.state is BackfillState.FAILED else 0


def _follow(c: Client, bf: Backfill, *, quiet: bool) -> Backfill:
    """Poll until ``bf`` ends, printing its progress line whenever it changes, with the time (a
    failover shows as a pause: any node answers the poll, the successor goes on from the cursor)."""
    shown = progress_line(bf)
    while bf.state is BackfillState.ACTIVE:
        time.sleep(WAIT_POLL_S)
        bf = c.get_backfill(bf.id)
        line = progress_line(bf)
        if line != shown and not quiet:
            print(f"  {fmt_clock_ms(clock.wall_ms())}  {line}", flush=True)
        shown = line
    return bf


def cmd_backfills(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        found = [c.get_backfill(a.backfill)] if a.backfill else c.list_backfills(a.id)
    if a.json:
        print_json([backfill_json(bf) for bf in found])
        return 0
    rows = [
        [
            bf.id,
            display_key(bf.job_id),
            fmt_ms(bf.from_ms),
            fmt_ms(bf.to_ms),
            bf.state.value,
            bf.planned,
            bf.done,
            bf.skipped,
        ]
        for bf in found
    ]
    print(table(rows, ["ID", "JOB", "FROM", "TO", "STATE", "PLANNED", "DONE", "SKIPPED"]))
    return 0


def register(sub: Any) -> None:
    """Add ``backfill`` and ``backfills`` to ``shardcron jobs``."""
    p = add_api_command(
        sub, "backfill", cmd_backfill, "run a job's slots in a past range that have no tick yet, once each"
    )
    p.add_argument(
        "--from",
        dest="from_",
        required=True,
        metavar="TIME",
        help="the range's start, included (ISO-8601, UTC unless an offset is given, or epoch ms)",
    )
    p.add_argument("--to", required=True, metavar="TIME", help="the range's end, excluded; not in the future")
    p.add_argument(
        "--overlap",
        default="skip",
        metavar="skip|allow",
        help="when a run of the job is going: skip the slot (recorded skipped) or start it anyway "
        "(default %(default)s)",
    )
    p.add_argument(
        "--rate",
        default=DEFAULT_RATE,
        metavar="N/s",
        help="slots started per second (or N/m, N/h) (default %(default)s)",
    )
    p.add_argument("--wait", action="store_true", help="follow its progress until it ends")
    ls = add_api_command(
        sub, "backfills", cmd_backfills, "list backfills, newest first (a job's, given its id)", with_id=False
    )
    ls.add_argument("id", nargs="?", metavar="ID", help="only this job's")
    ls.add_argument("--backfill", metavar="BACKFILL_ID", help="only this backfill")


__all__ = ["backfill_json", "cmd_backfill", "cmd_backfills", "describe", "register"]
