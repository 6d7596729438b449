"""shardcron: a sharded multi-leader cron cluster with fenced, exactly-once tick claims."""

__version__ = "0.1.0"
