"""Who is asking, may they act, and the headers every answer carries.

A visitor is identified by the session cookie (after the login form) or by an
``Authorization: Bearer`` header (scripts; no cookie, so no CSRF to fear). An
anonymous visitor sees the login form and nothing else. Every state-changing
request through a cookie must carry its session's CSRF secret (a form field or
the ``X-CSRF-Token`` header htmx sends), and if the browser names an Origin,
it must be this page's own.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from shardcron.dashboard.sessions import Session

COOKIE = "shardcron_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"

# No inline script or style anywhere: every script and sheet is a file of static/.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                           "base-uri 'none'")
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


def bearer_secret(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    return secret.strip() if scheme.lower() == "bearer" and secret.strip() else None


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


def local_path(target: str | None, default: str = "/cluster") -> str:
    """Where to go after logging in: only a path of this site (never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return target


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
