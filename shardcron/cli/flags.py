"""The flags of ``shardcron node`` and the store and etcd flags every command shares; ``NodeConfig`` from them.

Every flag also reads ``SHARDCRON_<NAME>``. Precedence: command-line flag, then
environment variable, then default. A bad value is a ``ConfigError`` naming the flag
(``cli/flag_values.py``). The modules that load grpc or croniter are imported in
the functions that need them: building the parser (``shardcron shards``, any
``--help``) loads neither.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import TYPE_CHECKING, Any

from shardcron.api import limits as L
from shardcron.api.limits import ApiLimits
from shardcron.cli.flag_values import (
    allow_python,
    duration_flag_ms,
    hostport,
    number,
    on_off,
    parse_bytes,
    parse_min_interval_ms,
    shell_allow,
    tick_retention_ms,
)
from shardcron.config import (
    DEFAULT_DB,
    DEFAULT_ETCD,
    DEFAULT_EXECUTOR_SLOTS,
    DEFAULT_LISTEN,
    DEFAULT_LOG_FORMAT,
    DEFAULT_LOG_LEVEL,
    DEFAULT_LOOKAHEAD_MS,
    DEFAULT_PREFIX,
    DEFAULT_SETTLE_S,
    DEFAULT_SHARDS,
    DEFAULT_SHUTDOWN_GRACE_S,
    DEFAULT_STORE_WAIT_S,
    DEFAULT_TTL_S,
    NodeConfig,
)
from shardcron.errors import ConfigError, InvalidJob
from shardcron.model import ExecutorSpec
from shardcron.rules.notification_rate import parse_rate as parse_notify_rate
from shardcron.rules.notifications import Defaults
from shardcron.spec.notifications import parse_cli

if TYPE_CHECKING:
    from shardcron.coordination.etcd import EtcdSecurity

# What a flag is added to: a parser, or one of its argument groups.
ArgumentHolder = argparse.ArgumentParser | argparse._ArgumentGroup

ENV_PREFIX = "SHARDCRON_"


def env_default(name: str, default: Any) -> Any:
    """The default for flag ``--name``: ``SHARDCRON_NAME`` if set, else ``default``."""
    raw = os.environ.get(env_name(name))
    if raw is None:
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return raw


def env_name(flag: str) -> str:
    """``--node-id`` (or ``node-id``) -> ``SHARDCRON_NODE_ID``."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


_SHOW_DEFAULT = object()

# Node flags that are gone, and what to do instead. Given on the command line, each is refused by its name
# (argparse alone would say only "unrecognized arguments"); set in its SHARDCRON_ variable, likewise.
REMOVED_NODE_FLAGS = {
    "--start-lead-max-ms": "the dispatcher no longer holds the GIL ahead of a start",
    "--dispatcher-priority": "the dispatcher no longer runs under SCHED_FIFO",
}


class _Removed(argparse.Action):
    """A flag in ``REMOVED_NODE_FLAGS``: using it is a usage error (status 2) saying it was removed."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise argparse.ArgumentError(self, f"was removed ({REMOVED_NODE_FLAGS[self.option_strings[0]]}); drop it")


def add_env_flag(
    p: ArgumentHolder, flag: str, help_: str, default: Any = None, *, default_text: Any = _SHOW_DEFAULT, **kwargs: Any
) -> None:
    """Add ``flag`` to ``p`` (a parser or an argument group), defaulting to ``SHARDCRON_<FLAG>`` or ``default``.

    The help ends with ``[SHARDCRON_<FLAG>]`` and the default: ``default_text``
    when given (None: say nothing), else the value itself when there is one.
    """
    suffix = f" [{env_name(flag)}]"
    if default_text is _SHOW_DEFAULT:
        default_text = None if default is None or isinstance(default, bool) else "%(default)s"
    if default_text is not None:
        suffix += f" (default {default_text})"
    p.add_argument(flag, default=env_default(flag.lstrip("-"), default), help=help_ + suffix, **kwargs)


def add_db_flag(p: ArgumentHolder) -> None:
    """``--db``, the same for every command that opens the store."""
    add_env_flag(
        p, "--db", "SQLAlchemy URL of the tick store: sqlite:///..., postgresql://..., mysql://...", DEFAULT_DB
    )


def add_common_etcd_flags(p: ArgumentHolder) -> None:
    add_env_flag(p, "--etcd", "comma-separated etcd endpoints, https:// for TLS", DEFAULT_ETCD)
    add_prefix_flag(p)
    add_etcd_security_flags(p)


def add_prefix_flag(p: ArgumentHolder) -> None:
    add_env_flag(p, "--prefix", "etcd key prefix of the cluster", DEFAULT_PREFIX)


def add_etcd_security_flags(p: ArgumentHolder) -> None:
    """TLS and auth for etcd; ``p`` may be a parser or an argument group."""
    add_env_flag(p, "--etcd-ca", "CA certificate that signed etcd's server certificate (enables TLS)")
    add_env_flag(p, "--etcd-cert", "client certificate for etcd mTLS")
    add_env_flag(p, "--etcd-key", "client key for etcd mTLS")
    add_env_flag(p, "--etcd-user", "etcd user name (auth enabled)")
    add_env_flag(
        p,
        "--etcd-password-file",
        "file holding the etcd password; or set SHARDCRON_ETCD_PASSWORD (never a flag: it would show in ps)",
    )


def etcd_security(a: argparse.Namespace) -> EtcdSecurity:
    """TLS and auth settings for etcd from the common flags; the password never comes from argv."""
    from shardcron.coordination.etcd import EtcdSecurity  # grpc: see the module doc

    password = os.environ.get(ENV_PREFIX + "ETCD_PASSWORD")
    if getattr(a, "etcd_password_file", None):
        try:
            with open(a.etcd_password_file, encoding="utf-8") as f:
                password = f.read().strip()
        except OSError as e:
            raise ConfigError(f"--etcd-password-file: cannot read {a.etcd_password_file}: {e.strerror}") from None
    user = getattr(a, "etcd_user", None)
    if user and password is None:
        raise ConfigError("--etcd-user needs a password: set SHARDCRON_ETCD_PASSWORD or --etcd-password-file")
    for flag in ("etcd_ca", "etcd_cert", "etcd_key"):
        path = getattr(a, flag, None)
        if path and not os.path.isfile(path):
            raise ConfigError(f"--{flag.replace('_', '-')}: no such file {path}")
    if bool(getattr(a, "etcd_cert", None)) != bool(getattr(a, "etcd_key", None)):
        raise ConfigError("--etcd-cert and --etcd-key go together")
    return EtcdSecurity(
        ca_file=getattr(a, "etcd_ca", None),
        cert_file=getattr(a, "etcd_cert", None),
        key_file=getattr(a, "etcd_key", None),
        user=user,
        password=password if user else None,
    )


def add_node_flags(p: ArgumentHolder) -> None:
    add_common_etcd_flags(p)
    add_env_flag(p, "--node-id", "unique node name", default_text="hostname-pid")
    add_db_flag(p)
    add_env_flag(p, "--listen", "gRPC listen address", DEFAULT_LISTEN)
    add_env_flag(p, "--advertise", "address other nodes reach this one at", default_text="--listen")
    add_env_flag(p, "--shards", "shard count; must match the cluster's", DEFAULT_SHARDS)
    add_env_flag(p, "--ttl", "session lease TTL in seconds", DEFAULT_TTL_S)
    add_env_flag(
        p,
        "--allow-shell",
        "allow shell jobs (remote code execution: only on trusted clusters)",
        False,
        action="store_true",
    )
    add_env_flag(
        p,
        "--allow-python",
        "allow python jobs whose target module is this one or under it (repeatable, or "
        "comma-separated in the variable; remote code execution: trusted clusters only)",
        default_text="none",
        action="append",
    )
    add_env_flag(p, "--jobs", "TOML or YAML file of jobs to import when leading their shards")
    add_env_flag(
        p,
        "--min-interval",
        "the cluster's minimum interval: jobs whose slots come closer (every, or "
        "cron with seconds) are refused, a guard against 1ms typed for 1m; 0 allows "
        "any. A new cluster takes it from its first node; a node given another value "
        "than the cluster's refuses to start (change it with `shardcron config "
        "--min-interval`)",
        default_text="the cluster's; 1s for a new cluster",
    )
    add_env_flag(p, "--settle", "seconds of membership quiet before rebalancing", DEFAULT_SETTLE_S)
    add_env_flag(
        p, "--shutdown-grace", "seconds to wait for running ticks on stop or hand-over", DEFAULT_SHUTDOWN_GRACE_S
    )
    add_env_flag(
        p,
        "--store-wait",
        "seconds a starting node waits for a store that does not answer (cut off, restarting) before it "
        "exits with the store's error; 0 gives up at the first failure",
        DEFAULT_STORE_WAIT_S,
    )
    add_env_flag(
        p,
        "--lookahead-ms",
        "claim slots this far ahead, in one transaction",
        DEFAULT_LOOKAHEAD_MS,
        default_text="%(default)s: not a whole second, so claiming never coincides with whole-second starts",
    )
    add_env_flag(
        p,
        "--executor-slots",
        "executions running at once on this node; a start beyond them waits for a "
        "free slot (and the HTTP pool allows this many requests to one host)",
        DEFAULT_EXECUTOR_SLOTS,
    )
    add_env_flag(
        p,
        "--fair-queuing",
        "how starts waiting for a slot are served: 'on', by weighted fair queuing "
        "across namespaces; 'off', first come first served (the baseline)",
        "on",
        choices=["on", "off"],
    )
    add_env_flag(
        p,
        "--tick-retention",
        "delete ticks whose slot is older than this (e.g. 30d), in small batches by "
        "each shard's leader; never nearer now than a job's catch-up window",
        "none",
        default_text="none: keep every tick",
    )
    add_env_flag(p, "--tls-cert", "serve the API over TLS with this certificate")
    add_env_flag(p, "--tls-key", "its key")
    add_env_flag(p, "--tls-client-ca", "require client certificates signed by this CA (mTLS)")
    add_env_flag(p, "--tls-ca", "CA to verify other nodes when forwarding", default_text="--tls-client-ca")
    add_env_flag(
        p,
        "--auth-token-file",
        "require a scoped bearer token on every call: the file's tokens "
        "(NAME sha256:HASH ROLE NAMESPACES per line, or legacy bare tokens) "
        "plus those created with `shardcron tokens create`",
    )
    add_env_flag(
        p,
        "--node-token",
        "this node's own secret, sent with the calls it forwards (its scope caps "
        "theirs); prefer the environment variable",
        default_text="a legacy token of --auth-token-file",
    )
    add_env_flag(p, "--shell-allow", "with --allow-shell: a regular expression every shell command must match in full")
    add_env_flag(p, "--metrics-listen", "serve Prometheus metrics on host:port", default_text="off")
    add_env_flag(
        p,
        "--http-listen",
        "serve the web dashboard on host:port (the same tokens as the API, TLS when "
        "the API has it; may be --metrics-listen's address, then /metrics is there "
        "too; needs the 'dashboard' extra)",
        default_text="off",
    )
    add_env_flag(
        p,
        "--health-listen",
        "also answer grpc.health.v1 Check on host:port, on threads of its own, so "
        "no API load delays a probe (plain text, no token)",
        default_text="off",
    )
    add_api_limit_flags(p)
    for flag in REMOVED_NODE_FLAGS:
        p.add_argument(flag, action=_Removed, nargs="?", help=argparse.SUPPRESS)
    add_env_flag(p, "--log-format", "log line format", DEFAULT_LOG_FORMAT, choices=["text", "json"])
    add_env_flag(p, "--log-level", "log level", DEFAULT_LOG_LEVEL, choices=["debug", "info", "warning", "error"])


def add_api_limit_flags(p: ArgumentHolder) -> None:
    add_env_flag(p, "--max-streams", "open WatchTicks streams this node serves at once", L.DEFAULT_MAX_STREAMS)
    add_env_flag(
        p,
        "--max-streams-per-peer",
        "open streams one caller address may hold on this node (calls "
        "other nodes forward count against --max-streams only)",
        L.DEFAULT_MAX_STREAMS_PER_PEER,
    )
    add_env_flag(p, "--max-request-bytes", "largest request this node reads, in bytes (or 8MiB, 512KiB)", "8MiB")
    add_env_flag(
        p,
        "--max-jobs-per-call",
        "jobs one PutJobs call may carry (jobs apply sends several calls)",
        L.DEFAULT_MAX_JOBS_PER_CALL,
    )
    add_env_flag(
        p,
        "--trigger-rate",
        "manual runs (TriggerJob) per job: COUNT/PERIOD, a burst of COUNT then evenly spread; off: no limit",
        L.DEFAULT_TRIGGER_RATE,
    )
    add_env_flag(
        p,
        "--notify-on-failure",
        "default notification for jobs without on_failure, run once per failed "
        "slot: an http(s):// webhook URL, or an executor table as JSON",
        None,
        metavar="SPEC",
    )
    add_env_flag(
        p,
        "--notify-on-recovery",
        "default notification for jobs without on_recovery, run once when a "
        "job succeeds after failing (same SPEC forms)",
        None,
        metavar="SPEC",
    )
    add_env_flag(
        p,
        "--notify-rate",
        "at most COUNT default notifications per job per DURATION; the rest are "
        "recorded suppressed and counted (off: no limit)",
        "10/1m",
        metavar="COUNT/DURATION",
    )
    add_env_flag(p, "--keepalive", "ping every gRPC connection (to callers and to other nodes) this often", "10s")
    add_env_flag(
        p,
        "--keepalive-timeout",
        "drop a connection whose ping is not answered within this (a frozen or "
        "unreachable peer fails its calls after --keepalive plus this)",
        "5s",
    )


def api_limits_from_args(a: argparse.Namespace) -> ApiLimits:
    max_request = parse_bytes("max-request-bytes", a.max_request_bytes)
    if not 64 * 1024 <= max_request <= 1024**3:
        raise ConfigError(f"--max-request-bytes: must be between 64KiB and 1GiB, got {a.max_request_bytes!r}")
    try:
        trigger_rate = L.parse_rate(a.trigger_rate, "--trigger-rate")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return ApiLimits(
        max_streams=number("max-streams", a.max_streams, int, 1),
        max_streams_per_peer=number("max-streams-per-peer", a.max_streams_per_peer, int, 1),
        max_request_bytes=max_request,
        max_jobs_per_call=number("max-jobs-per-call", a.max_jobs_per_call, int, 1),
        trigger_rate=trigger_rate,
    )


def node_config_from_args(a: argparse.Namespace) -> NodeConfig:
    listen = hostport("listen", a.listen)
    advertise = hostport("advertise", a.advertise) if a.advertise else listen
    if advertise.rpartition(":")[0] in ("0.0.0.0", "[::]", "::", ""):
        raise ConfigError(f"--advertise: {advertise!r} is not reachable by other nodes; give a routable host:port")
    for flag, why in REMOVED_NODE_FLAGS.items():
        if env_name(flag) in os.environ:
            raise ConfigError(f"{env_name(flag)} ({flag}) was removed ({why}); unset it")
    node_id = a.node_id or f"{socket.gethostname()}-{os.getpid()}"
    if not node_id or "/" in node_id or len(node_id) > 128:
        raise ConfigError(f"--node-id: {node_id!r} must be 1-128 characters without '/'")
    return NodeConfig(
        node_id=node_id,
        etcd=a.etcd,
        db=a.db,
        listen=listen,
        advertise=advertise,
        shards=number("shards", a.shards, int, 1),
        ttl=number("ttl", a.ttl, int, 2),
        prefix=a.prefix,
        allow_shell=bool(a.allow_shell),
        jobs=a.jobs,
        settle=number("settle", a.settle, float, 0.0),
        shutdown_grace=number("shutdown-grace", a.shutdown_grace, float, 0.0),
        store_wait=number("store-wait", a.store_wait, float, 0.0),
        lookahead_ms=number("lookahead-ms", a.lookahead_ms, int, 0),
        executor_slots=number("executor-slots", a.executor_slots, int, 1),
        fair_queuing=on_off("fair-queuing", a.fair_queuing),
        min_interval_ms=None if a.min_interval is None else parse_min_interval_ms(a.min_interval),
        log_format=a.log_format,
        log_level=a.log_level,
        metrics_listen=hostport("metrics-listen", a.metrics_listen) if a.metrics_listen else None,
        http_listen=hostport("http-listen", a.http_listen) if a.http_listen else None,
        health_listen=hostport("health-listen", a.health_listen) if a.health_listen else None,
        etcd_security=etcd_security(a),
        **_api_security(a),
        api_limits=api_limits_from_args(a),
        keepalive_ms=(
            duration_flag_ms("keepalive", a.keepalive, 100),
            duration_flag_ms("keepalive-timeout", a.keepalive_timeout, 100),
        ),
        shell_allow=shell_allow(a.shell_allow, bool(a.allow_shell)),
        allow_python=allow_python(a.allow_python),
        tick_retention_ms=tick_retention_ms(a.tick_retention),
        **_notify(a),
    )


def _notify(a: argparse.Namespace) -> dict[str, Any]:
    """The default notifications, refused with the flag's name and the field's when malformed."""
    specs: dict[str, ExecutorSpec | None] = {}
    for flag, key in (("--notify-on-failure", "on_failure"), ("--notify-on-recovery", "on_recovery")):
        raw = getattr(a, key.replace("on_", "notify_on_"), None)
        try:
            specs[key] = parse_cli(raw, flag) if raw else None
        except InvalidJob as e:
            raise ConfigError(str(e)) from None
    for flag, spec in zip(("--notify-on-failure", "--notify-on-recovery"), specs.values(), strict=True):
        if spec is not None and spec.kind.value == "shell" and not a.allow_shell:
            raise ConfigError(f"{flag}: a shell notification needs --allow-shell")
        if spec is not None and spec.kind.value == "python" and spec.python is not None:
            from shardcron.executors.python_target import check_target  # croniter: see the module doc

            refused = check_target(spec.python.target, allow_python(a.allow_python))
            if refused is not None:
                raise ConfigError(f"{flag}: {refused}")
    return {"notify_defaults": Defaults(**specs), "notify_rate": parse_notify_rate(a.notify_rate or "10/1m")}


def _api_security(a: argparse.Namespace) -> dict[str, Any]:
    from shardcron.api.security import ServerSecurity, load_tokens, server_credentials  # grpc: see the module doc
    from shardcron.client.channel import ChannelSecurity  # grpc

    tokens, legacy_secret = load_tokens(a.auth_token_file)
    server = ServerSecurity(a.tls_cert, a.tls_key, a.tls_client_ca, tokens)
    tls = server_credentials(server) is not None  # validates the flags and the files now
    forward = ChannelSecurity(
        ca_file=(a.tls_ca or a.tls_client_ca) if tls else None,
        cert_file=a.tls_cert if tls and a.tls_client_ca else None,
        key_file=a.tls_key if tls and a.tls_client_ca else None,
        token=getattr(a, "node_token", None) or legacy_secret,  # this node's own identity when it forwards a call
    )
    if tls and not forward.ca_file:
        raise ConfigError(
            "with --tls-cert, give --tls-ca (the CA of the nodes' certificates) so this node can "
            "verify the others when it forwards a call"
        )
    return {"api_security": server, "forward_security": forward}


__all__ = [
    "ENV_PREFIX",
    "REMOVED_NODE_FLAGS",
    "ArgumentHolder",
    "add_api_limit_flags",
    "add_common_etcd_flags",
    "add_db_flag",
    "add_env_flag",
    "add_etcd_security_flags",
    "add_node_flags",
    "add_prefix_flag",
    "api_limits_from_args",
    "env_default",
    "env_name",
    "etcd_security",
    "node_config_from_args",
]
