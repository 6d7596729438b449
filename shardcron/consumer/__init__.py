"""The consumer's guard: run each slot's effect once downstream, and refuse a deposed leader's messages.

``from shardcron.consumer import RedisDeduper, SqlDeduper, TickInfo, Verdict, dedupe``: the guard's
interface and decorator are in ``guard``, one module per store beside it (``redis``, ``sql``), the tick as
a consumer reads it in ``tick``, and the names a tick travels under in ``tick_names``.
"""

from shardcron.consumer.guard import Deduper, Verdict, dedupe
from shardcron.consumer.redis import RedisDeduper
from shardcron.consumer.sql import SqlDeduper
from shardcron.consumer.tick import NotATick, TickInfo

__all__ = ["Deduper", "NotATick", "RedisDeduper", "SqlDeduper", "TickInfo", "Verdict", "dedupe"]
