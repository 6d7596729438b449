"""Which optional extra each executor kind needs, and a clear error when it is missing.

Broker clients are optional dependencies (``pip install 'shardcron[celery]'``),
imported only inside the executor that uses them. A node asked to run a kind
whose extra is not installed refuses the job at admission, naming the extra,
instead of failing every tick.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

from shardcron.errors import InvalidJob
from shardcron.model import ExecutorKind

# kind -> (extra, the top-level modules it brings)
EXTRAS: dict[ExecutorKind, tuple[str, tuple[str, ...]]] = {
    ExecutorKind.CELERY: ("celery", ("celery", "kombu")),
    ExecutorKind.RQ: ("redis", ("redis", "rq")),
    ExecutorKind.ARQ: ("redis", ("redis", "arq")),
    ExecutorKind.REDIS_STREAM: ("redis", ("redis",)),
    ExecutorKind.NATS: ("nats", ("nats",)),
    ExecutorKind.AMQP: ("amqp", ("aio_pika",)),
}


class MissingExtra(InvalidJob):
    """The node lacks the optional dependency a job's executor kind needs."""

    def __init__(self, kind: ExecutorKind, extra: str, module: str):
        super().__init__(
            "executor.kind",
            f"{kind.value} jobs need the {extra!r} extra, which this node lacks "
            f"(no module {module!r}): pip install 'shardcron[{extra}]'",
        )
        self.extra = extra


def require_extra(kind: ExecutorKind) -> None:
    """Raise ``MissingExtra`` when ``kind`` needs an extra that is not installed."""
    need = EXTRAS.get(kind)
    if need is None:
        return
    extra, modules = need
    for module in modules:
        if not _importable(module):
            raise MissingExtra(kind, extra, module)


@functools.cache
def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # already imported without a spec (a module made at run time): it is there
        return module in sys.modules
