"""Node settings: every flag of ``shardcron node`` also reads ``SHARDCRON_<NAME>``.

Precedence: command-line flag, then environment variable, then default.
"""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

from shardcron.errors import ConfigError

ENV_PREFIX = "SHARDCRON_"


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    etcd: str
    db: str
    listen: str
    advertise: str
    shards: int
    ttl: int
    prefix: str
    allow_shell: bool
    jobs: str | None
    settle: float
    shutdown_grace: float
    lookahead_ms: int
    log_format: str
    log_level: str
    metrics_listen: str | None = None
    shell_allow: object = None  # re.Pattern every shell command must fully match, when set
    etcd_security: object = None  # coordination.etcd.EtcdSecurity
    api_security: object = None  # api.security.ServerSecurity
    forward_security: object = None  # api.security.ChannelSecurity: how this node calls other nodes


def env_default(name: str, default):
    """The default for flag ``--name``: ``SHARDCRON_NAME`` if set, else ``default``."""
    raw = os.environ.get(ENV_PREFIX + name.upper().replace("-", "_"))
    if raw is None:
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return raw


def add_common_etcd_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--etcd", default=env_default("etcd", "127.0.0.1:2379"),
                   help="comma-separated etcd endpoints, https:// for TLS [SHARDCRON_ETCD] (default %(default)s)")
    p.add_argument("--prefix", default=env_default("prefix", "/cron"),
                   help="etcd key prefix of the cluster [SHARDCRON_PREFIX] (default %(default)s)")
    add_etcd_security_flags(p)


def add_etcd_security_flags(p) -> None:
    """TLS and auth for etcd; ``p`` may be a parser or an argument group."""
    p.add_argument("--etcd-ca", default=env_default("etcd-ca", None),
                   help="CA certificate that signed etcd's server certificate (enables TLS) [SHARDCRON_ETCD_CA]")
    p.add_argument("--etcd-cert", default=env_default("etcd-cert", None),
                   help="client certificate for etcd mTLS [SHARDCRON_ETCD_CERT]")
    p.add_argument("--etcd-key", default=env_default("etcd-key", None),
                   help="client key for etcd mTLS [SHARDCRON_ETCD_KEY]")
    p.add_argument("--etcd-user", default=env_default("etcd-user", None),
                   help="etcd user name (auth enabled) [SHARDCRON_ETCD_USER]")
    p.add_argument("--etcd-password-file", default=env_default("etcd-password-file", None),
                   help="file holding the etcd password; or set SHARDCRON_ETCD_PASSWORD "
                        "(never a flag: it would show in ps) [SHARDCRON_ETCD_PASSWORD_FILE]")


def etcd_security(a: argparse.Namespace):
    """TLS and auth settings for etcd from the common flags; the password never comes from argv."""
    from shardcron.coordination.etcd import EtcdSecurity

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
    return EtcdSecurity(ca_file=getattr(a, "etcd_ca", None), cert_file=getattr(a, "etcd_cert", None),
                        key_file=getattr(a, "etcd_key", None), user=user, password=password if user else None)


def add_node_flags(p: argparse.ArgumentParser) -> None:
    add_common_etcd_flags(p)
    p.add_argument("--node-id", default=env_default("node-id", None),
                   help="unique node name [SHARDCRON_NODE_ID] (default: hostname-pid)")
    p.add_argument("--db", default=env_default("db", "sqlite:///shardcron.db"),
                   help="SQLAlchemy URL of the tick store [SHARDCRON_DB] (default %(default)s)")
    p.add_argument("--listen", default=env_default("listen", "127.0.0.1:7070"),
                   help="gRPC listen address [SHARDCRON_LISTEN] (default %(default)s)")
    p.add_argument("--advertise", default=env_default("advertise", None),
                   help="address other nodes reach this one at [SHARDCRON_ADVERTISE] (default: --listen)")
    p.add_argument("--shards", default=env_default("shards", 64),
                   help="shard count; must match the cluster's [SHARDCRON_SHARDS] (default %(default)s)")
    p.add_argument("--ttl", default=env_default("ttl", 10),
                   help="session lease TTL in seconds [SHARDCRON_TTL] (default %(default)s)")
    p.add_argument("--allow-shell", action="store_true", default=env_default("allow-shell", False),
                   help="allow shell jobs (remote code execution: only on trusted clusters) [SHARDCRON_ALLOW_SHELL]")
    p.add_argument("--jobs", default=env_default("jobs", None),
                   help="TOML or YAML file of jobs to import when leading their shards [SHARDCRON_JOBS]")
    p.add_argument("--settle", default=env_default("settle", 1.0),
                   help="seconds of membership quiet before rebalancing [SHARDCRON_SETTLE] (default %(default)s)")
    p.add_argument("--shutdown-grace", default=env_default("shutdown-grace", 5.0),
                   help="seconds to wait for running ticks on stop or hand-over [SHARDCRON_SHUTDOWN_GRACE]")
    p.add_argument("--lookahead-ms", default=env_default("lookahead-ms", 600),
                   help="claim slots this far ahead, in one transaction [SHARDCRON_LOOKAHEAD_MS] (default "
                        "%(default)s: not a whole second, so claiming never coincides with whole-second starts)")
    p.add_argument("--tls-cert", default=env_default("tls-cert", None),
                   help="serve the API over TLS with this certificate [SHARDCRON_TLS_CERT]")
    p.add_argument("--tls-key", default=env_default("tls-key", None), help="its key [SHARDCRON_TLS_KEY]")
    p.add_argument("--tls-client-ca", default=env_default("tls-client-ca", None),
                   help="require client certificates signed by this CA (mTLS) [SHARDCRON_TLS_CLIENT_CA]")
    p.add_argument("--tls-ca", default=env_default("tls-ca", None),
                   help="CA to verify other nodes when forwarding (default: --tls-client-ca) [SHARDCRON_TLS_CA]")
    p.add_argument("--auth-token-file", default=env_default("auth-token-file", None),
                   help="require a bearer token from this file (one per line) on every call "
                        "[SHARDCRON_AUTH_TOKEN_FILE]")
    p.add_argument("--shell-allow", default=env_default("shell-allow", None),
                   help="with --allow-shell: a regular expression every shell command must match in full "
                        "[SHARDCRON_SHELL_ALLOW]")
    p.add_argument("--metrics-listen", default=env_default("metrics-listen", None),
                   help="serve Prometheus metrics on host:port [SHARDCRON_METRICS_LISTEN] (default: off)")
    p.add_argument("--log-format", default=env_default("log-format", "text"), choices=["text", "json"],
                   help="log line format [SHARDCRON_LOG_FORMAT]")
    p.add_argument("--log-level", default=env_default("log-level", "info"),
                   choices=["debug", "info", "warning", "error"], help="[SHARDCRON_LOG_LEVEL]")


def _number(name: str, raw, kind, minimum):
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"--{name}: expected a number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"--{name}: must be at least {minimum}, got {value}")
    return value


def _hostport(name: str, value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--{name}: expected host:port, got {value!r}")
    return value


def node_config_from_args(a: argparse.Namespace) -> NodeConfig:
    listen = _hostport("listen", a.listen)
    advertise = _hostport("advertise", a.advertise) if a.advertise else listen
    if advertise.rpartition(":")[0] in ("0.0.0.0", "[::]", "::", ""):
        raise ConfigError(f"--advertise: {advertise!r} is not reachable by other nodes; give a routable host:port")
    node_id = a.node_id or f"{socket.gethostname()}-{os.getpid()}"
    if not node_id or "/" in node_id or len(node_id) > 128:
        raise ConfigError(f"--node-id: {node_id!r} must be 1-128 characters without '/'")
    return NodeConfig(
        node_id=node_id,
        etcd=a.etcd,
        db=a.db,
        listen=listen,
        advertise=advertise,
        shards=_number("shards", a.shards, int, 1),
        ttl=_number("ttl", a.ttl, int, 2),
        prefix=a.prefix,
        allow_shell=bool(a.allow_shell),
        jobs=a.jobs,
        settle=_number("settle", a.settle, float, 0.0),
        shutdown_grace=_number("shutdown-grace", a.shutdown_grace, float, 0.0),
        lookahead_ms=_number("lookahead-ms", a.lookahead_ms, int, 0),
        log_format=a.log_format,
        log_level=a.log_level,
        metrics_listen=_hostport("metrics-listen", a.metrics_listen) if a.metrics_listen else None,
        etcd_security=etcd_security(a),
        **_api_security(a),
        shell_allow=_shell_allow(a.shell_allow, bool(a.allow_shell)),
    )


def _shell_allow(pattern: str | None, allow_shell: bool):
    if not pattern:
        return None
    if not allow_shell:
        raise ConfigError("--shell-allow only makes sense with --allow-shell")
    import re

    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"--shell-allow: not a regular expression: {e}") from None


def _api_security(a: argparse.Namespace) -> dict:
    from shardcron.api.security import ChannelSecurity, ServerSecurity, load_tokens, server_credentials

    tokens = load_tokens(a.auth_token_file)
    server = ServerSecurity(a.tls_cert, a.tls_key, a.tls_client_ca, tokens)
    tls = server_credentials(server) is not None  # validates the flags and the files now
    forward = ChannelSecurity(
        ca_file=(a.tls_ca or a.tls_client_ca) if tls else None,
        cert_file=a.tls_cert if tls and a.tls_client_ca else None,
        key_file=a.tls_key if tls and a.tls_client_ca else None,
        token=min(tokens) if tokens else None,
    )
    if tls and not forward.ca_file:
        raise ConfigError("with --tls-cert, give --tls-ca (the CA of the nodes' certificates) so this node can "
                          "verify the others when it forwards a call")
    return {"api_security": server, "forward_security": forward}
