"""``shardcron ticks JOB [--follow]``: a job's ticks through the API, newest first, then as they are written."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from shardcron.cli.args import whole
from shardcron.cli.common import add_api_command, api_client, print_json, table
from shardcron.cli.output import TICK_HEADERS, tick_json, tick_row
from shardcron.client.errors import NotFound
from shardcron.errors import ShardcronError
from shardcron.model import Tick, TickStatus
from shardcron.spec.bounds import MAX_HISTORY_LIMIT

if TYPE_CHECKING:
    from shardcron.client.client import Client

# ``ticks --limit``: more than a job keeps at most (bounds.MAX_HISTORY_LIMIT) would never be listed.
MAX_LISTED_TICKS = MAX_HISTORY_LIMIT


class NoSuchJob(ShardcronError):
    """``ticks`` of an id that is neither a job nor the id of past ticks."""


def cmd_ticks(a: argparse.Namespace) -> int:
    with api_client(a) as c:
        ticks = c.list_ticks(a.id, limit=a.limit)
        if not ticks:
            _require_job(c, a.id)  # no ticks of a job that does not exist is a typo, not an empty history
        if not a.follow:
            if a.json:
                print_json([tick_json(t) for t in ticks])
            elif ticks:
                print(table([tick_row(t) for t in ticks], TICK_HEADERS))
            else:
                print(f"no ticks recorded for {a.id} yet", file=sys.stderr)
            return 0
        return _follow(c, a, ticks)


def _require_job(client: Client, job_id: str) -> None:
    try:
        client.get_job(job_id)
    except NotFound:
        raise NoSuchJob(
            f"no job named {job_id!r} (and no ticks recorded under that id); `shardcron jobs list` shows the jobs"
        ) from None


def _follow(c: Client, a: argparse.Namespace, ticks: list[Tick]) -> int:
    """Oldest first, then each result as it is written; one line each (JSON lines with --json)."""
    watch = c.watch_ticks(a.id)
    seen: set[tuple[int, int, TickStatus]] = set()
    widths = [26, 10, 7, 14, 6, 9]

    def emit(t: Tick) -> None:
        if a.json:
            print(json.dumps(tick_json(t), sort_keys=True), flush=True)
        else:
            cells = [str(x) for x in tick_row(t)]
            print(
                "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=False)) + "  " + cells[-1], flush=True
            )

    if not a.json:
        print(
            "  ".join(h.ljust(w) for h, w in zip(TICK_HEADERS, widths, strict=False)) + "  " + TICK_HEADERS[-1],
            flush=True,
        )
    for t in reversed(ticks):
        seen.add((t.scheduled_at_ms, t.attempt, t.status))
        emit(t)
    # Ctrl-C cancels the watch, and the loop below ends as after any cancel. A KeyboardInterrupt raised
    # wherever the main thread happens to be, inside gRPC's wait for the next event, is not guaranteed to
    # leave that wait's locks in a state the cancel after it can use.
    interrupted = threading.Event()

    def on_interrupt(signum: int, frame: object) -> None:
        interrupted.set()
        watch.cancel()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        for t in watch:
            key = (t.scheduled_at_ms, t.attempt, t.status)
            if key not in seen:
                emit(t)
    finally:
        signal.signal(signal.SIGINT, previous)
        watch.cancel()
    if interrupted.is_set():
        raise KeyboardInterrupt  # the command's exit status for an interrupt (cli.EXIT_INTERRUPTED)
    return 0


def register(subparsers: Any) -> None:
    """Add ``ticks`` to the ``shardcron`` command (called by ``cli.build_parser``)."""
    ticks = add_api_command(subparsers, "ticks", cmd_ticks, "a job's ticks, newest first")
    ticks.add_argument(
        "--limit", type=whole(1, MAX_LISTED_TICKS), default=20, metavar="N", help="how many (default %(default)s)"
    )
    ticks.add_argument("--follow", "-f", action="store_true", help="then print each new result as it is written")


__all__ = ["MAX_LISTED_TICKS", "NoSuchJob", "cmd_ticks", "register"]
