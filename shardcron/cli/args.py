"""argparse types for the CLI's numbers: each one bounded, each refusal naming what was typed.

A number past what its destination holds (a protobuf int32, a BIGINT, a wait)
would otherwise fail deep inside a call with a traceback. argparse prints a
type's refusal as ``argument --flag: <message>`` and exits with status 2 before
the command touches etcd, a node or a port.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable

from shardcron.spec.bounds import INT32_MAX, MAX_DURATION_MS, shown

# A wait longer than the longest duration a job may carry is never what was meant;
# it also keeps every deadline built from it far inside threading.TIMEOUT_MAX.
MAX_SECONDS = MAX_DURATION_MS / 1000
MAX_PORT = 65535
# The API carries shard numbers and counts as int32.
MAX_SHARD = INT32_MAX


def whole(minimum: int, maximum: int) -> Callable[[str], int]:
    """A whole number within ``[minimum, maximum]``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:  # also past int()'s 4300 digits
            value = None
        if value is None or not minimum <= value <= maximum:
            raise ArgumentTypeError(f"must be a whole number from {minimum} to {maximum}, got {shown(text)}")
        return value

    parse.__name__ = "whole number"
    return parse


def seconds(*, zero: bool = False, maximum: float = MAX_SECONDS) -> Callable[[str], float]:
    """A finite number of seconds, more than 0 (at least 0 with ``zero``) and at most ``maximum``."""
    least = "at least 0" if zero else "more than 0"
    most = f"{maximum:.0f}" if float(maximum).is_integer() else f"{maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            value = math.nan
        if not (value >= 0 if zero else value > 0) or not value <= maximum:  # nan fails both
            raise ArgumentTypeError(f"must be a number of seconds {least} and at most {most}, got {shown(text)}")
        return value

    parse.__name__ = "seconds"
    return parse


__all__ = ["MAX_PORT", "MAX_SECONDS", "MAX_SHARD", "seconds", "whole"]
