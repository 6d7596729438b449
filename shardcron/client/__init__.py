"""The Python client of the Scheduler API: ``from shardcron.client import Client``."""

from shardcron.client.client import Client

__all__ = ["Client"]
