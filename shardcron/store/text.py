"""Making free text (command output, error messages) fit for every store."""

from __future__ import annotations

from shardcron.model import OUTPUT_LIMIT_BYTES


def clip(text: str | None, limit_bytes: int = OUTPUT_LIMIT_BYTES) -> str | None:
    """``text`` cut to at most ``limit_bytes`` of UTF-8, never inside a character.

    Also replaces what some database would refuse with U+FFFD: NUL (PostgreSQL
    text cannot hold it) and the lone surrogates that ``surrogateescape``
    makes of a process's undecodable bytes (no database takes them).
    """
    if text is None:
        return None
    try:
        # Escaped bytes become bytes again, and invalid UTF-8 is replaced below.
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate surrogateescape did not make
        data = text.encode("utf-8", "replace")
    clean = data.decode("utf-8", "replace").replace("\x00", "\ufffd")
    data = clean.encode("utf-8")
    if len(data) <= limit_bytes:
        return clean
    # "ignore" drops only the partial character the cut may leave at the end.
    return data[:limit_bytes].decode("utf-8", "ignore")


__all__ = ["clip"]
