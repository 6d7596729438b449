"""The Python client of the Scheduler API: ``from shardcron.client import Client``."""

from shardcron.client.channel import ChannelSecurity
from shardcron.client.client import Client
from shardcron.client.errors import ApiError, Conflict, InvalidRequest, LimitExceeded, NotFound, Unavailable
from shardcron.client.results import PutResult, TokenInfo
from shardcron.client.targets import BadToken, bearer_secret, parse_targets
from shardcron.client.watch import TickWatch

__all__ = [
    "ApiError",
    "BadToken",
    "ChannelSecurity",
    "Client",
    "Conflict",
    "InvalidRequest",
    "LimitExceeded",
    "NotFound",
    "PutResult",
    "TickWatch",
    "TokenInfo",
    "Unavailable",
    "bearer_secret",
    "parse_targets",
]
