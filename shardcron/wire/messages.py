"""What every message conversion shares: ``BadRequest``, optional fields, page tokens and the page size cap."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from google.protobuf.message import Message

from shardcron.errors import InvalidJob

# The most entries one page of a list call holds: the servicer serves no more, so a client asks for no more.
PAGE_MAX = 1000


class BadRequest(InvalidJob):
    """A request field outside the job definition is malformed (a page token, a page size, ...).

    An ``InvalidJob`` too, so it takes the same road: INVALID_ARGUMENT naming the field.
    """


def optional(p: Message, name: str) -> Any:
    """The value of the optional field ``name`` of ``p``, None when unset."""
    return getattr(p, name) if p.HasField(name) else None


def encode_page_token(value: str) -> str:
    """Opaque to callers: the last job id (or tick time) of a page."""
    return base64.urlsafe_b64encode(value.encode("utf-8")).decode("ascii")


def decode_page_token(token: str, field: str = "page_token") -> str | None:
    if not token:
        return None
    try:
        return base64.b64decode(token.encode("ascii"), altchars=b"-_", validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise BadRequest(field, "is not a token this API returned; pass next_page_token unchanged") from None


__all__ = ["PAGE_MAX", "BadRequest", "decode_page_token", "encode_page_token", "optional"]
