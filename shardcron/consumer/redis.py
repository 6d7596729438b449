"""The guard's Redis store: ``RedisDeduper``, one atomic Lua script per message."""

from __future__ import annotations

from typing import Any

from shardcron.consumer.guard import Verdict
from shardcron.consumer.tick import TickInfo

# KEYS[1] the job's highest fence, KEYS[2] the slot; ARGV[1] the tick's fence, ARGV[2] the TTL in ms.
# One script, so the fence check, the slot record and the fence raise are one
# atomic step: two consumers of one slot cannot both see it unrecorded.
_ADMIT_LUA = """
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[1]) or '-1')
if fence < highest then
  return 'stale-fence'
end
local verdict = 'first'
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  verdict = 'duplicate'
end
-- A higher fence is news even on a duplicate: its leader deposed the older one.
-- (ARGV[1] itself, not the Lua number: a number would be printed as a float.)
if fence > highest then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif verdict == 'first' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return verdict
"""

_DEFAULT_TTL_S = 7 * 86400


class RedisDeduper:
    """Admits ticks against Redis: one Lua script per message.

    Keys (under ``prefix``): ``{<job>}:fence`` holds the highest fence seen for
    the job, ``{<job>}:slot:<scheduled_at_ms>`` marks a seen slot. Both expire
    ``ttl_s`` after the job's last admitted tick, so deleted jobs leave nothing
    behind; a redelivery older than that is admitted again. The braces are a
    Redis Cluster hash tag: a job's keys live on one node, as a script needs.
    """

    def __init__(self, url_or_client: Any, *, prefix: str = "shardcron:dedupe:", ttl_s: float = _DEFAULT_TTL_S) -> None:
        if isinstance(url_or_client, str):
            redis = _require("redis", "redis", "RedisDeduper")
            url_or_client = redis.Redis.from_url(url_or_client, socket_timeout=5, socket_connect_timeout=5)
        self.client = url_or_client
        self.prefix = prefix
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._admit = self.client.register_script(_ADMIT_LUA)

    def admit(self, tick: TickInfo) -> Verdict:
        fence_key, slot_key = self._keys(tick)
        answer = self._admit(keys=[fence_key, slot_key], args=[tick.fence, self.ttl_ms])
        return Verdict(answer.decode() if isinstance(answer, bytes) else answer)

    def release(self, tick: TickInfo) -> None:
        """Forget an admitted slot (its run failed), so a retry or redelivery is FIRST again."""
        self.client.delete(self._keys(tick)[1])

    def _keys(self, tick: TickInfo) -> tuple[str, str]:
        tag = f"{self.prefix}{{{tick.key}}}"
        return f"{tag}:fence", f"{tag}:slot:{tick.scheduled_at_ms}"


def _require(module: str, extra: str, who: str) -> Any:
    # An optional extra, imported only when a deduper is built from a URL.
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"{who} needs the {extra!r} extra: pip install 'shardcron[{extra}]'") from None


__all__ = ["RedisDeduper"]
