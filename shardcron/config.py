"""Node settings: what a node runs with (``NodeConfig``) and the plain defaults of its flags.

``cli/flags.py`` builds a ``NodeConfig`` from the command line and the
``SHARDCRON_<NAME>`` environment variables; this module only holds the values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardcron.api.limits import ApiLimits
    from shardcron.api.security import ServerSecurity
    from shardcron.client.channel import ChannelSecurity
    from shardcron.coordination.etcd import EtcdSecurity
    from shardcron.rules.notification_rate import Rate
    from shardcron.rules.notifications import Defaults

DEFAULT_ETCD = "127.0.0.1:2379"
DEFAULT_PREFIX = "/cron"
DEFAULT_DB = "sqlite:///shardcron.db"
DEFAULT_LISTEN = "127.0.0.1:7070"
DEFAULT_SHARDS = 64
DEFAULT_TTL_S = 10
DEFAULT_SETTLE_S = 1.0
DEFAULT_SHUTDOWN_GRACE_S = 5.0
# How long a starting node waits for a store that does not answer (cut off, restarting) before it gives up.
DEFAULT_STORE_WAIT_S = 120.0
DEFAULT_LOOKAHEAD_MS = 600  # not a whole second, so claiming never coincides with whole-second starts
DEFAULT_EXECUTOR_SLOTS = 1000
DEFAULT_KEEPALIVE_MS = (10_000, 5_000)  # (ping every, give up after)
DEFAULT_LOG_FORMAT = "text"
DEFAULT_LOG_LEVEL = "info"


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
    # An explicit --min-interval (ms): the first node writes it into the cluster's config, a later
    # one must agree with it. None: take the cluster's (1s for a new cluster).
    min_interval_ms: int | None
    metrics_listen: str | None = None
    http_listen: str | None = None  # the web dashboard (shardcron/dashboard); may be metrics_listen's address
    health_listen: str | None = None  # grpc.health.v1 Check on a port of its own (api/health_port.py)
    shell_allow: re.Pattern[str] | None = None  # every shell command must fully match it, when set
    allow_python: tuple[str, ...] = ()  # module prefixes Python jobs may call (--allow-python)
    store_wait: float = DEFAULT_STORE_WAIT_S  # seconds a starting node waits for an unavailable store
    etcd_security: EtcdSecurity | None = None
    api_security: ServerSecurity | None = None
    forward_security: ChannelSecurity | None = None  # how this node calls other nodes
    api_limits: ApiLimits | None = None  # None: the defaults
    keepalive_ms: tuple[int, int] = DEFAULT_KEEPALIVE_MS  # (ping every, give up after) on every gRPC channel
    tick_retention_ms: int | None = None  # ticks older than this are pruned by their shard's leader; None: kept
    # The cluster-wide default notifications and their rate limit per job (None: no limit):
    # --notify-on-failure, --notify-on-recovery, --notify-rate.
    notify_defaults: Defaults | None = None
    notify_rate: Rate | None = None
    executor_slots: int = DEFAULT_EXECUTOR_SLOTS  # executions running at once on this node; the starts beyond wait
    fair_queuing: bool = True  # waiting starts served by weighted fair queuing across namespaces; False: first-come


__all__ = [
    "DEFAULT_DB",
    "DEFAULT_ETCD",
    "DEFAULT_EXECUTOR_SLOTS",
    "DEFAULT_KEEPALIVE_MS",
    "DEFAULT_LISTEN",
    "DEFAULT_LOG_FORMAT",
    "DEFAULT_LOG_LEVEL",
    "DEFAULT_LOOKAHEAD_MS",
    "DEFAULT_PREFIX",
    "DEFAULT_SETTLE_S",
    "DEFAULT_SHARDS",
    "DEFAULT_SHUTDOWN_GRACE_S",
    "DEFAULT_STORE_WAIT_S",
    "DEFAULT_TTL_S",
    "NodeConfig",
]
