"""What every ``shardcron`` command shares: times as people read them, etcd from the common flags."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from shardcron.clock import rfc3339_ms
from shardcron.config import etcd_security
from shardcron.errors import EtcdUnavailable


def fmt_ms(ms: int | None) -> str:
    """Epoch ms as RFC 3339 UTC with milliseconds (``2026-12-02T13:07:12.857Z``); ``-`` for none."""
    return rfc3339_ms(ms) if ms else "-"


def fmt_clock_ms(ms: int | None) -> str:
    """Epoch ms as the UTC time of day (``13:07:12.857``), for a stream of ticks; ``-`` for none."""
    return fmt_ms(ms)[11:23] if ms else "-"


ETCD_HINT = "is etcd running there? point --etcd (or SHARDCRON_ETCD) at your cluster's endpoints"


_FROM_FLAGS = object()


@contextmanager
def open_etcd(a: argparse.Namespace, *, endpoints: str | None = None, security=_FROM_FLAGS) -> Iterator:
    """An ``Etcd`` client from the common flags (or ``endpoints`` and ``security``), closed on the way out.

    etcd not answering says which flag chooses it: under ``make dev`` it runs on
    a port of its own, and the default 127.0.0.1:2379 finds nothing.
    """
    from shardcron.coordination.etcd import Etcd

    try:
        etcd = Etcd(endpoints or a.etcd, timeout_s=3.0,
                    security=etcd_security(a) if security is _FROM_FLAGS else security)
    except EtcdUnavailable as e:
        raise EtcdUnavailable(f"{e} ({ETCD_HINT})") from None
    try:
        yield etcd
    except EtcdUnavailable as e:
        raise EtcdUnavailable(f"{e} ({ETCD_HINT})") from None
    finally:
        etcd.close()
