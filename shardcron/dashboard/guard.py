"""Who is asking, may they act, and the headers every answer carries.

A visitor is identified by the session cookie (after the login form) or by an
``Authorization`` header (scripts; no cookie, so no CSRF to fear), read as the
API reads it: ``Bearer`` in any case, or the bare token, whitespace dropped. An
anonymous visitor sees the login form and nothing else. Every state-changing
request through a cookie must carry its session's CSRF secret (a form field or
the ``X-CSRF-Token`` header htmx sends), and if the browser names an Origin,
it must be this page's own.
"""

from __future__ import annotations

import hmac
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from aiohttp import web

from shardcron.api.tokens import secret_from_authorization
from shardcron.dashboard.sessions import Session

COOKIE = "shardcron_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"

# The most a request body may hold: the largest form (a backfill) is well under 1 KiB.
MAX_BODY_BYTES = 16 * 1024
# The most characters each form or query field the dashboard reads may hold; beyond, 400 naming the field.
FIELD_LIMITS = {
    "id": 256,  # a job id is at most 256 bytes (jobspec)
    "namespace": 64,
    "from": 64,
    "to": 64,  # a time: ISO 8601 or epoch milliseconds
    "rate": 32,
    CSRF_FIELD: 128,
    "token": 512,
    "next": 2048,
}
DECODINGS_CHECKED = 3  # a redirect target is checked as it is and as decoded up to this many times

# No inline script or style anywhere: every script and sheet is a file of static/.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with its own form posts.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class Visitor:
    session: Session
    by_bearer: bool  # True: the header named the token; no cookie, no CSRF check


class FieldTooLong(ValueError):
    """A form or query field over its limit (``FIELD_LIMITS``), or not text; the message names the field."""


def field(values: Mapping, name: str, default: str = "") -> str:
    """Form or query field ``name`` (``default`` when absent); FieldTooLong when it is over its limit."""
    value = values.get(name, default)
    if not isinstance(value, str):
        raise FieldTooLong(f"{name}: expected text, not a file")
    limit = FIELD_LIMITS[name]
    if len(value) > limit:
        raise FieldTooLong(f"{name}: at most {limit} characters, got {len(value)}")
    return value


def bearer_secret(request: web.Request) -> str | None:
    return secret_from_authorization(request.headers.get("Authorization"))


def csrf_ok(request: web.Request, session: Session, form_value: str | None) -> bool:
    given = request.headers.get(CSRF_HEADER) or form_value or ""
    return hmac.compare_digest(given.encode(), session.csrf.encode())


def same_origin(request: web.Request) -> bool:
    """A browser names the page's origin on a POST; it must be this very host (absent: a non-browser)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.netloc == request.host and parts.scheme == request.scheme


def local_path(target: str | None) -> str:
    """Where to go after logging in: ``target`` when it is a path of this site, else ``/``.

    Browsers drop tabs and newlines from a URL and read ``\\`` as ``/``, and a proxy may decode
    once more: ``/%09/evil.example`` becomes ``//evil.example``, another host. So ``target``, and
    each of its percent-decodings, must be a plain path: starting with one ``/``, without a
    backslash, whitespace, a control or format character (bidi overrides), a scheme or a host."""
    if not target or len(target) > FIELD_LIMITS["next"]:
        return "/"
    text = target
    for _ in range(DECODINGS_CHECKED):
        if not _plain_path(text):
            return "/"
        decoded = unquote(text)
        if decoded == text:
            return target
        text = decoded
    return "/"  # still encoded after that many decodings: nothing a page of ours links to


def _plain_path(text: str) -> bool:
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        return False
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text):
        return False
    parts = urlsplit(text)
    return not parts.scheme and not parts.netloc


@web.middleware
async def security_headers(request: web.Request, handler):
    try:
        response = await handler(request)
    except web.HTTPException as e:
        response = e
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")
    if isinstance(response, web.HTTPException):
        raise response
    return response
