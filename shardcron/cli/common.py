"""What every ``shardcron`` command shares: times as people read and write them, etcd, the API's client and flags.

A command that calls the API adds its flags with ``add_api_flags`` (or
``add_api_command``), opens ``api_client(a)`` and prints with ``table`` or
``print_json``. The client, etcd and the security settings load grpc: they are
imported in the functions that use them, so building the parser (``shardcron
shards``, any ``--help``) does not load it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from shardcron.cli.args import seconds
from shardcron.cli.flags import add_env_flag, etcd_security
from shardcron.clock import rfc3339_ms
from shardcron.errors import ConfigError, EtcdUnavailable
from shardcron.spec.bounds import MAX_TIME_MS, MIN_TIME_MS, shown
from shardcron.spec.namespaces import NAMESPACE_ENV, namespace_from_cli

if TYPE_CHECKING:
    from shardcron.client.channel import ChannelSecurity
    from shardcron.client.client import Client
    from shardcron.coordination.etcd import Etcd, EtcdSecurity

# -- times ---------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def fmt_ms(ms: int | None) -> str:
    """Epoch ms as RFC 3339 UTC with milliseconds (``2026-12-02T13:07:12.857Z``); ``-`` for none."""
    return rfc3339_ms(ms) if ms else "-"


def fmt_clock_ms(ms: int | None) -> str:
    """Epoch ms as the UTC time of day (``13:07:12.857``), for a stream of ticks; ``-`` for none."""
    return fmt_ms(ms)[11:23] if ms else "-"


def parse_time_ms(text: str, flag: str) -> int:
    """ISO-8601 (a time without an offset is UTC) or integer epoch milliseconds, within years 1970-9999."""
    s = text.strip()
    if re.fullmatch(r"-?\d{1,20}", s):
        ms = int(s)
    else:
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            raise ConfigError(
                f"{flag}: expected ISO-8601 (2026-03-08T07:00:00Z) or epoch milliseconds, got {shown(text)}"
            ) from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        ms = (dt - _EPOCH) // _MS
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise ConfigError(f"{flag}: {shown(text)} is outside 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z")
    return ms


# -- etcd ----------------------------------------------------------------------------------

ETCD_HINT = "is etcd running there? point --etcd (or SHARDCRON_ETCD) at your cluster's endpoints"


_FROM_FLAGS: Any = object()


@contextmanager
def open_etcd(
    a: argparse.Namespace, *, endpoints: str | None = None, security: EtcdSecurity | None = _FROM_FLAGS
) -> Iterator[Etcd]:
    """An ``Etcd`` client from the common flags (or ``endpoints`` and ``security``), closed on the way out.

    etcd not answering says which flag chooses it: under ``make dev`` it runs on
    a port of its own, and the default 127.0.0.1:2379 finds nothing.
    """
    from shardcron.coordination.etcd import Etcd  # grpc: see the module doc

    try:
        etcd = Etcd(
            endpoints or a.etcd, timeout_s=3.0, security=etcd_security(a) if security is _FROM_FLAGS else security
        )
    except EtcdUnavailable as e:
        raise EtcdUnavailable(f"{e} ({ETCD_HINT})") from None
    try:
        yield etcd
    except EtcdUnavailable as e:
        raise EtcdUnavailable(f"{e} ({ETCD_HINT})") from None
    finally:
        etcd.close()


# -- the API -------------------------------------------------------------------------------

DEFAULT_SERVER = "127.0.0.1:7070"
TOKEN_ENV = "SHARDCRON_TOKEN"


def add_api_flags(p: argparse.ArgumentParser) -> None:
    """``--server``, ``--json``, ``--request-timeout``, ``--namespace`` and the TLS and token flags."""
    p.add_argument(
        "--server",
        action="append",
        metavar="HOST:PORT",
        help=f"a node's API address; repeat to give others to try [SHARDCRON_SERVER] (default {DEFAULT_SERVER})",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--request-timeout",
        type=seconds(),
        default=30.0,
        metavar="SECONDS",
        help="give up on the call after this long; more than 0 (default %(default)s)",
    )
    p.add_argument(
        "-n",
        "--namespace",
        metavar="NAME",
        help=f"the namespace of the jobs named [{NAMESPACE_ENV}] (default: default)",
    )
    add_env_flag(p, "--tls-ca", "CA that signed the nodes' certificates (enables TLS)")
    add_env_flag(p, "--tls-cert", "client certificate, for nodes that require mTLS")
    add_env_flag(p, "--tls-key", "client key")
    p.add_argument("--token", default=None, help="bearer token (prefer SHARDCRON_TOKEN: argv is visible in ps)")


def add_api_command(
    sub: Any, name: str, func: Callable[[argparse.Namespace], int], help_: str, *, with_id: bool = True
) -> argparse.ArgumentParser:
    """A subcommand that calls the API: its flags, and (``with_id``) a job's id first."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
    if with_id:
        p.add_argument("id", metavar="ID", help="the job's id")
    add_api_flags(p)
    p.set_defaults(func=func)
    return p


def channel_security_from_args(a: argparse.Namespace) -> ChannelSecurity:
    """The CLI's --tls-ca/--tls-cert/--tls-key/--token (token also from SHARDCRON_TOKEN)."""
    from shardcron.client.channel import ChannelSecurity  # grpc: see the module doc

    token = getattr(a, "token", None) or os.environ.get(TOKEN_ENV) or None
    if bool(getattr(a, "tls_cert", None)) != bool(getattr(a, "tls_key", None)):
        raise ConfigError("--tls-cert and --tls-key go together")
    return ChannelSecurity(getattr(a, "tls_ca", None), getattr(a, "tls_cert", None), getattr(a, "tls_key", None), token)


def api_client(a: argparse.Namespace, *, namespace: str | None = None) -> Client:
    """A client of the nodes ``--server`` names, with the flags' security and namespace (``namespace``:
    this one instead, for a command whose jobs are all named by key)."""
    from shardcron.client.client import Client  # grpc: see the module doc
    from shardcron.client.targets import bearer_secret  # grpc

    servers = a.server or [os.environ.get("SHARDCRON_SERVER") or DEFAULT_SERVER]
    security = channel_security_from_args(a)
    if security.token:  # checked here to name where it came from; Client checks any token again
        source = "--token" if getattr(a, "token", None) else TOKEN_ENV
        security = replace(security, token=bearer_secret(security.token, source))
    return Client(
        servers,
        timeout_s=a.request_timeout,
        security=security,
        namespace=namespace or namespace_from_cli(getattr(a, "namespace", None), os.environ),
    )


def table(rows: list[list[Any]], headers: list[str]) -> str:
    """Rows as a plain table, every cell as given (no number parsing)."""
    return tabulate(rows, headers=headers, tablefmt="plain", disable_numparse=True)


def print_json(value: object) -> None:
    """``value`` as indented JSON with sorted keys."""
    print(json.dumps(value, indent=2, sort_keys=True))


__all__ = [
    "DEFAULT_SERVER",
    "ETCD_HINT",
    "add_api_command",
    "add_api_flags",
    "api_client",
    "channel_security_from_args",
    "fmt_clock_ms",
    "fmt_ms",
    "open_etcd",
    "parse_time_ms",
    "print_json",
    "table",
]
