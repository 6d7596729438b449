"""Text a user points the CLI at (a file, or ``-`` for standard input): read no further than a limit, UTF-8 only.

Reading stops at the limit plus one byte, so ``/dev/urandom`` or a runaway pipe
is refused at once instead of read until memory runs out. The callers phrase the
errors, each for its own flag or file.
"""

from __future__ import annotations

import sys


class TooLarge(Exception):
    """The input has more than the limit's bytes."""


class NotUtf8(Exception):
    """The input is not UTF-8: ``byte`` at ``offset`` (on ``line``, counted from 1) is the first that is not."""

    def __init__(self, byte: int, offset: int, line: int):
        super().__init__(f"byte 0x{byte:02x} at offset {offset} (line {line}) is not valid UTF-8")
        self.byte, self.offset, self.line = byte, offset, line


def read_bounded(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path`` (``-``: standard input). Raises ``OSError`` or ``TooLarge``."""
    if path == "-":
        raw = sys.stdin.buffer.read(limit + 1)
    else:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    if len(raw) > limit:
        raise TooLarge(path)
    return raw


def utf8(raw: bytes) -> str:
    """``raw`` decoded, without a leading byte-order mark (it says "UTF-8"; it is not content). Raises ``NotUtf8``."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise NotUtf8(raw[e.start], e.start, raw.count(b"\n", 0, e.start) + 1) from None


__all__ = ["NotUtf8", "TooLarge", "read_bounded", "utf8"]
