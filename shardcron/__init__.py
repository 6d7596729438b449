"""shardcron: a sharded multi-leader cron cluster with fenced, exactly-once tick claims."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `from shardcron import Client` works, but importing shardcron (every CLI
    # command does) does not load grpc and the generated code until it is used.
    if name == "Client":
        from shardcron.client.client import Client

        return Client
    raise AttributeError(f"module 'shardcron' has no attribute {name!r}")
