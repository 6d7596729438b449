"""shardcron: a sharded multi-leader cron cluster with fenced, exactly-once tick claims."""

from __future__ import annotations

from importlib.metadata import version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardcron.client import Client

__version__ = version("shardcron")
__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    # `from shardcron import Client` works, but importing shardcron (every CLI command does) does not
    # load grpc and the generated code, heavy libraries, until the client is used.
    if name == "Client":
        from shardcron.client import Client

        return Client
    raise AttributeError(f"module 'shardcron' has no attribute {name!r}")
