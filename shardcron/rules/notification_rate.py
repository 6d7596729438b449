"""The default notification's rate limit: at most ``count`` per job per ``window_ms`` (``--notify-rate 10/1m``).

Counted per job from the notifications table itself, inside the fenced transaction that claims the
next one, so the decision is recorded with the row and a successor sees the same count: one job
failing every second sends ``count`` notifications a window and records the rest ``suppressed``
(counted, never silently dropped). Per job because the store can count it exactly under one
shard's fence; a cluster-wide count would need every shard's leader to agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardcron.errors import ConfigError, InvalidJob
from shardcron.spec.durations import parse_duration_ms

_RATE = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class Rate:
    count: int
    window_ms: int


UNLIMITED = None
DEFAULT_RATE = Rate(10, 60_000)


def parse_rate(text: str, flag: str = "--notify-rate") -> Rate | None:
    """``"10/1m"`` -> Rate(10, 60000); ``"off"``: no limit (None). Anything else: ``ConfigError`` naming ``flag``."""
    if text.strip().lower() == "off":
        return UNLIMITED
    m = _RATE.fullmatch(text)
    if not m:
        raise ConfigError(f"{flag}: expected COUNT/DURATION such as 10/1m, or off; got {text!r}")
    try:
        window_ms = parse_duration_ms(m.group(2), flag)
    except InvalidJob as e:
        raise ConfigError(f"{flag}: {e.reason}") from None
    count = int(m.group(1))
    if count < 1 or window_ms < 1:
        raise ConfigError(f"{flag}: both the count and the window must be positive, got {text!r}")
    return Rate(count, window_ms)


def window_start_ms(rate: Rate, now_ms: int) -> int:
    """Notifications claimed after this instant count against ``rate`` at ``now_ms``."""
    return now_ms - rate.window_ms


def allows(rate: Rate | None, claimed_in_window: int) -> bool:
    """Whether one more may be sent when ``claimed_in_window`` (not suppressed) were claimed in the window."""
    return rate is None or claimed_in_window < rate.count
