"""The coordinator's settings for this node: who it is, where it listens, and its timings."""

from __future__ import annotations

from dataclasses import dataclass

from shardcron.store.engine import CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S

# How long a coordinator step (one shard's action, a re-read of the cluster; see runtime/steps.py) may last,
# beyond the bounds of one store call and one etcd call, before the node judges it stuck. A step makes a few
# calls; each takes milliseconds while its server answers, and one that fails ends the step within its own
# bound. So a step still going one store call, one etcd call and this margin after it began waits on what no
# timeout bounds (a connection that neither answers nor ends), and the node gives its lease up rather than
# keep it alive for a coordinator that cannot act on it. The margin is for the calls that did answer, on a
# machine loaded enough to keep threads seconds from the CPU; too short, and a slow store costs a hand-over.
STEP_MARGIN_S = 15.0


def step_budget(etcd_call_s: float) -> float:
    """How long one coordinator step may last (``CoordinatorSettings.step_budget_s``): a store call's bound (the
    engine's connect and statement timeouts), an etcd call's (``etcd_call_s``, the client's timeout) and
    ``STEP_MARGIN_S``."""
    return CONNECT_TIMEOUT_S + STATEMENT_TIMEOUT_S + etcd_call_s + STEP_MARGIN_S


@dataclass
class CoordinatorSettings:
    node_id: str
    address: str
    shard_count: int
    ttl_s: int = 10
    settle_s: float = 1.0  # membership changes inside this window are handled as one
    resign_grace_s: float = 5.0  # how long a resigning leader waits for running ticks
    started_at_ms: int = 0
    fence_offset: int = 0  # added to election revisions (see store/epoch.py)
    step_budget_s: float = step_budget(etcd_call_s=5.0)  # past it, a step is a stall (runtime/steps.py)
