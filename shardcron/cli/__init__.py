"""The ``shardcron`` command.

Every expected failure is a ``ShardcronError`` and becomes one line on stderr
and exit status 1 (a command may choose another: ``jobs diff`` exits 2, as
``diff(1)`` does, since its 1 means "a difference"); a bad flag is one line and
exit status 2, as argparse has it.
A traceback in front of a user is a bug: anything else that reaches ``main``
is one line naming it, and ``SHARDCRON_DEBUG=1`` prints its traceback too.
A closed standard output (``shardcron shards | head -3``) ends the command
quietly with status 141, the shell's 128 + SIGPIPE (see ``EXIT_BROKEN_PIPE``).

Each command imports what loads grpc, SQLAlchemy or croniter inside its own
function, so a run (and any ``--help``) loads only what its command uses.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from datetime import UTC, datetime
from importlib.metadata import version
from typing import TYPE_CHECKING, cast

from tabulate import tabulate

from shardcron import logs
from shardcron.cli.args import MAX_SHARD, seconds, whole
from shardcron.cli.common import fmt_ms, open_etcd
from shardcron.cli.flag_values import parse_min_interval_ms
from shardcron.cli.flags import (
    add_common_etcd_flags,
    add_db_flag,
    add_node_flags,
    etcd_security,
    node_config_from_args,
)
from shardcron.coordination.keys import KeyLayout
from shardcron.errors import ConfigError, ShardcronError
from shardcron.spec.bounds import cut

if TYPE_CHECKING:
    import grpc


# -- shardcron node ------------------------------------------------------------------


def cmd_node(a: argparse.Namespace) -> int:
    from shardcron.node import run_node  # loaded by this command only (see cli/__init__.py)

    cfg = node_config_from_args(a)
    logs.setup(cfg.node_id, cfg.log_format, cfg.log_level)
    return run_node(cfg)


# -- shardcron shards ----------------------------------------------------------------


def shard_map(etcd_endpoints: str, prefix: str, security=None) -> dict:
    """The shard-to-leader map, from etcd alone."""
    from shardcron.coordination.view import (  # loaded by this command only (see cli/__init__.py)
        read_view,
        shard_map_from_view,
    )

    with open_etcd(argparse.Namespace(), endpoints=etcd_endpoints, security=security) as etcd:
        view = read_view(etcd, KeyLayout(prefix))
    return shard_map_from_view(view, prefix)


def cmd_shards(a: argparse.Namespace) -> int:
    m = shard_map(a.etcd, a.prefix, etcd_security(a))
    if a.json:
        print(json.dumps(m, indent=2))
        return 0
    if m["shard_count"] is None:
        print(f"no cluster under {a.prefix} in etcd at {a.etcd} (no node has started yet)")
        return 0
    if m.get("reshard"):
        r = m["reshard"]
        print(
            f"RESHARD IN PROGRESS: {r.get('from')} -> {r.get('to')} shards ({r.get('state')}); "
            "shards are handed over, then the cluster cuts over\n"
        )
    print(
        tabulate(
            [
                [
                    r["shard"],
                    r["leader"] or "-",
                    r["address"] or "-",
                    r["fence"] or "-",
                    fmt_ms(r["leader_since_ms"]),
                    r["candidates"],
                    "-" if r["jobs"] is None else r["jobs"],
                ]
                for r in m["shards"]
            ],
            headers=["SHARD", "LEADER", "ADDRESS", "FENCE", "LEADER SINCE", "CANDIDATES", "JOBS"],
            tablefmt="plain",
        )
    )
    print()
    print(
        tabulate(
            [
                [n["node"], n["address"], n["leads"], n["fair_share"], "draining" if n["draining"] else "active"]
                for n in m["nodes"]
            ],
            headers=["NODE", "ADDRESS", "LEADS", "FAIR SHARE", "STATE"],
            tablefmt="plain",
        )
    )
    return 0


# -- shardcron nodes / drain -----------------------------------------------------------


def cmd_nodes(a: argparse.Namespace) -> int:
    m = shard_map(a.etcd, a.prefix, etcd_security(a))
    if a.json:
        print(json.dumps(m["nodes"], indent=2))
        return 0
    print(
        tabulate(
            [
                [
                    n["node"],
                    n["address"],
                    fmt_ms(n["started_at_ms"]),
                    n["leads"],
                    n["fair_share"],
                    "draining" if n["draining"] else "active",
                ]
                for n in m["nodes"]
            ],
            headers=["NODE", "ADDRESS", "STARTED", "LEADS", "FAIR SHARE", "STATE"],
            tablefmt="plain",
        )
    )
    return 0


def cmd_drain(a: argparse.Namespace) -> int:
    """Ask a node to hand every shard over and stay up as a non-candidate (or undo that)."""

    layout = KeyLayout(a.prefix)
    with open_etcd(a) as etcd:
        if a.undo:
            etcd.delete(layout.drain(a.node_id))
            print(f"node {a.node_id} is no longer draining: it takes its share of shards again")
            return 0
        if etcd.get(layout.node(a.node_id)) is None:
            print(f"note: no live node {a.node_id!r} under {a.prefix}; it will start drained", file=sys.stderr)
        etcd.put(
            layout.drain(a.node_id), json.dumps({"requested_at_ms": int(datetime.now(UTC).timestamp() * 1000)}).encode()
        )
        print(
            f"node {a.node_id} is draining: it hands its shards over and stays up as a non-candidate "
            f"(undo with `shardcron drain --undo {a.node_id}`)"
        )
        return 0


# -- shardcron fences -------------------------------------------------------------------


def cmd_fences(a: argparse.Namespace) -> int:
    from shardcron.store.engine import make_engine  # loaded by this command only (see cli/__init__.py)
    from shardcron.store.epoch import (  # loaded by this command only (see cli/__init__.py)
        highest_fence,
        read_epoch,
        rebase,
    )
    from shardcron.store.fences import read_fences  # loaded by this command only (see cli/__init__.py)

    engine = make_engine(a.db)
    try:
        if a.action == "show":
            epoch = read_epoch(engine)
            rows = read_fences(engine)
            if a.json:
                print(
                    json.dumps(
                        {
                            "etcd_cluster_id": epoch.cluster_id,
                            "offset": epoch.offset,
                            "fences": {k: r.fence for k, r in sorted(rows.items())},
                        }
                    )
                )
                return 0
            cid = f"{epoch.cluster_id:x}" if epoch.cluster_id else "none recorded yet"
            print(f"etcd cluster: {cid}   fence offset: {epoch.offset}")
            print(
                tabulate(
                    [[k, r.fence, r.node_id or "-", fmt_ms(r.updated_at_ms)] for k, r in sorted(rows.items())],
                    headers=["SHARD", "FENCE", "NODE", "UPDATED"],
                    tablefmt="plain",
                )
            )
            return 0
        with open_etcd(a) as etcd:
            cluster_id, revision = etcd.status()
        before = read_epoch(engine)
        if before.cluster_id == cluster_id and not a.force:
            print(f"the fences already belong to etcd cluster {cluster_id:x}; nothing to do")
            return 0
        epoch = rebase(engine, cluster_id)
        print(
            f"fences rebased onto etcd cluster {cluster_id:x} (was "
            f"{before.cluster_id and format(before.cluster_id, 'x')}): new fences are etcd revisions + "
            f"{epoch.offset}, above every stored fence (highest {highest_fence(engine)}). Nodes may start now."
        )
        return 0
    finally:
        engine.dispose()


# -- shardcron reshard ------------------------------------------------------------------


def cmd_reshard(a: argparse.Namespace) -> int:
    from shardcron.coordination import reshard  # loaded by this command only (see cli/__init__.py)
    from shardcron.store.engine import make_engine  # loaded by this command only (see cli/__init__.py)

    layout = KeyLayout(a.prefix)
    with open_etcd(a) as etcd:
        if a.abort:
            print("reshard request cancelled" if reshard.abort(etcd, layout) else "no reshard in progress")
            return 0
        if a.shards is None:
            raise ConfigError("--shards N is required (or --abort)")
        engine = make_engine(a.db)
        try:
            reshard.reshard(etcd, layout, engine, a.shards, timeout_s=a.timeout)
        finally:
            engine.dispose()
        return 0


# -- shardcron config ------------------------------------------------------------------


def cmd_config(a: argparse.Namespace) -> int:
    """Print the cluster's config, or change its minimum interval (every node admits by it at once)."""
    from shardcron.coordination.membership import (  # loaded by this command only (see cli/__init__.py)
        read_cluster_config,
        set_min_interval,
    )
    from shardcron.spec.durations import format_duration_ms  # loaded by this command only (see cli/__init__.py)

    wanted = None if a.min_interval is None else parse_min_interval_ms(a.min_interval)  # before connecting
    layout = KeyLayout(a.prefix)
    with open_etcd(a) as etcd:
        if wanted is not None:
            before, after = set_min_interval(etcd, layout, wanted)
            if before == after:
                print(f"the cluster's minimum interval is already {format_duration_ms(wanted)}; nothing to do")
            else:
                print(
                    f"the cluster's minimum interval is now {format_duration_ms(after.min_interval_ms)} (was "
                    f"{format_duration_ms(before.min_interval_ms)}): every node admits new and changed jobs by "
                    "it at once; stored jobs keep running as stored"
                )
            return 0
        cluster, _, _ = read_cluster_config(etcd, layout)
    if a.json:
        print(
            json.dumps(
                {
                    "prefix": a.prefix,
                    "shards": cluster.shards,
                    "min_interval_ms": cluster.min_interval_ms,
                    "created_at_ms": cluster.created_at_ms,
                }
            )
        )
        return 0
    print(
        tabulate(
            [
                ["prefix", a.prefix],
                ["shards", cluster.shards],
                ["min interval", format_duration_ms(cluster.min_interval_ms)],
                ["created", fmt_ms(cluster.created_at_ms)],
            ],
            tablefmt="plain",
        )
    )
    return 0


# -- the parser ------------------------------------------------------------------------


def register(sub) -> None:
    """The node and cluster commands: they import neither grpc nor SQLAlchemy until they run."""
    node = sub.add_parser("node", help="run a node")
    add_node_flags(node)
    node.set_defaults(func=cmd_node)

    shards = sub.add_parser("shards", help="print the shard-to-leader map (from etcd alone)")
    add_common_etcd_flags(shards)
    shards.add_argument("--json", action="store_true", help="print JSON")
    shards.set_defaults(func=cmd_shards)

    nodes = sub.add_parser("nodes", help="list the cluster's members (from etcd alone)")
    add_common_etcd_flags(nodes)
    nodes.add_argument("--json", action="store_true", help="print JSON")
    nodes.set_defaults(func=cmd_nodes)

    drain = sub.add_parser("drain", help="make a node hand its shards over and stay up as a non-candidate")
    add_common_etcd_flags(drain)
    drain.add_argument("node_id", metavar="NODE_ID")
    drain.add_argument("--undo", action="store_true", help="stop draining: the node takes shards again")
    drain.set_defaults(func=cmd_drain)

    fences = sub.add_parser("fences", help="show the stored fences, or rebase them onto a rebuilt etcd")
    fences.add_argument("action", choices=["show", "rebase"])
    add_common_etcd_flags(fences)
    add_db_flag(fences)
    fences.add_argument("--force", action="store_true", help="rebase even if the cluster id did not change")
    fences.add_argument("--json", action="store_true")
    fences.set_defaults(func=cmd_fences)

    config = sub.add_parser("config", help="print the cluster's config, or change its minimum interval")
    add_common_etcd_flags(config)
    config.add_argument(
        "--min-interval",
        metavar="DURATION",
        help="set the cluster's minimum interval (e.g. 200ms, 1s; 0 allows any): nodes admit new "
        "and changed jobs by it at once, stored jobs keep running as stored",
    )
    config.add_argument("--json", action="store_true", help="print JSON")
    config.set_defaults(func=cmd_config)

    rs = sub.add_parser("reshard", help="change the shard count of the running cluster")
    add_common_etcd_flags(rs)
    add_db_flag(rs)
    rs.add_argument("--shards", type=whole(1, MAX_SHARD), required=False, help="the new shard count")
    rs.add_argument("--timeout", type=seconds(), default=120.0, help="seconds to wait for the hand-over")
    rs.add_argument("--abort", action="store_true", help="cancel a reshard that has not cut over yet")
    rs.set_defaults(func=cmd_reshard)


# Every command, in the order `shardcron --help` lists them, and the module whose
# ``register(subparsers)`` adds it. Most of those modules import grpc, SQLAlchemy
# or alembic: a run imports only the module of the command it names.
COMMANDS: dict[str, str] = {
    "node": "shardcron.cli",
    "shards": "shardcron.cli",
    "nodes": "shardcron.cli",
    "drain": "shardcron.cli",
    "fences": "shardcron.cli",
    "config": "shardcron.cli",
    "reshard": "shardcron.cli",
    "jobs": "shardcron.cli.jobs",
    "ticks": "shardcron.cli.ticks",
    "calendars": "shardcron.cli.calendars",
    "tokens": "shardcron.cli.tokens",
    "namespaces": "shardcron.cli.namespaces",
    "import": "shardcron.cli.importing",
    "audit": "shardcron.cli.admin",
    "db": "shardcron.cli.admin",
    "bench": "shardcron.dev.bench",
    "dev": "shardcron.dev.local_cluster",
}


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (exit status 2): the usage of ``jobs put`` alone is
    twenty lines, and would bury the error. Its subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {cut(message, MESSAGE_CHARS)} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, only the commands of its module."""
    p = Parser(prog="shardcron", description="A sharded multi-leader cron cluster.")
    p.add_argument("--version", action="version", version=f"shardcron {version('shardcron')}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = dict.fromkeys([COMMANDS[command]] if command in COMMANDS else COMMANDS.values())
    for module in modules:
        importlib.import_module(module).register(sub)
    return p


def named_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names; None when it names none we know (no command, a typo),
    so that the parser gets every command and can list them."""
    first = next((x for x in argv if not x.startswith("-")), None)
    return first if first in COMMANDS else None


EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_BUG = 70  # EX_SOFTWARE: an exception no command expects
EXIT_INTERRUPTED = 130  # 128 + SIGINT
# 128 + SIGPIPE: what a shell reports for a command killed by writing to a closed pipe, as C tools
# (and Python before it ignored SIGPIPE) are. Python's own recipe exits 1, which a pipeline
# would read as a failure of the command rather than of its reader going away.
EXIT_BROKEN_PIPE = 141
DEBUG_ENV = "SHARDCRON_DEBUG"
MESSAGE_CHARS = 2000  # an error line quotes a caller's value, never megabytes of it


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names; its exit status (see the module doc)."""
    argv = sys.argv[1:] if argv is None else argv
    a = None
    try:
        try:
            a = build_parser(named_command(argv)).parse_args(argv)
            status = a.func(a)
        except SystemExit:  # --help, --version and usage errors print, then exit
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # inside the guard: a pipe's buffered output fails here, not at exit
        return status
    except BrokenPipeError:
        return stdout_gone()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ShardcronError as e:
        return say_error(str(e), error_status(a))
    except grpc_error() as e:
        call = cast("grpc.Call", e)  # a failed call's RpcError is also its Call
        return say_error(f"the API call failed: {call.code().name}: {call.details()}", error_status(a))
    except Exception as e:  # noqa: BLE001 - the last line of defence: a traceback in front of a user is a bug
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        return say_error(
            f"unexpected {type(e).__name__}: {e} (a bug in shardcron; rerun with {DEBUG_ENV}=1 for the traceback)",
            EXIT_BUG,
        )


def error_status(a: argparse.Namespace | None) -> int:
    """The status of an expected failure of the command ``a`` ran: its own (``set_defaults(error_status=)``),
    else ``EXIT_ERROR``."""
    return getattr(a, "error_status", EXIT_ERROR)


def say_error(message: str, status: int) -> int:
    """``message`` as one line on stderr; ``status``. A stderr that is gone too is no reason to raise."""
    try:
        print(f"shardcron: error: {cut(message, MESSAGE_CHARS)}", file=sys.stderr, flush=True)
    except OSError:
        pass
    return status


def stdout_gone() -> int:
    """The reader of standard output went away (``| head``): stop quietly. Standard output is
    pointed at /dev/null first, or the interpreter's flush at exit would fail and complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a test's stand-in stdout)
        pass
    return EXIT_BROKEN_PIPE


def grpc_error() -> type[BaseException]:
    """``grpc.RpcError`` if grpc is loaded (a command that never called the API did not import it)."""
    grpc = sys.modules.get("grpc")
    return grpc.RpcError if grpc is not None else _NeverRaised


class _NeverRaised(Exception):
    """Stands for ``grpc.RpcError`` when grpc is not imported: nothing raises it."""
