"""shardcron: a sharded multi-leader cron cluster with fenced, exactly-once tick claims."""

__version__ = "0.1.0"

from shardcron.client import Client  # noqa: E402,F401 (after __version__, which cli.py imports)
