"""Which HTTP header values and URL passwords are secret: never logged, never shown, never returned by the API.

A job names its own secret headers (``secret_headers``, ``--secret-header``);
the credentials headers below are secret whether it names them or not, so a
token passed as a plain header (``--header "Authorization:Bearer x"``) is
masked too. Every place that shows a header asks ``secret_names``.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from shardcron.model import HttpSpec

MASK = "***"

# Lower-case. These carry credentials by definition (RFC 9110 11.6.2 and 11.7.2,
# RFC 6265); X-Api-Key is the usual name of an API key where no standard applies.
ALWAYS_SECRET = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})


def secret_names(http: HttpSpec) -> frozenset[str]:
    """The lower-case names of ``http``'s headers whose values must be masked."""
    return ALWAYS_SECRET | {name.lower() for name in http.secret_headers}


def masked_headers(http: HttpSpec) -> list[tuple[str, str]]:
    """``http.headers`` with every secret value replaced by ``MASK``."""
    secret = secret_names(http)
    return [(name, MASK if name.lower() in secret else value) for name, value in http.headers]


def mask_url(url: str) -> str:
    """``redis://user:pw@host/0`` -> ``redis://user:***@host/0``: a URL as it may be logged or returned."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostport}"))
    except ValueError:
        return url


def scrub_password(text: str, url: str) -> str:
    """``text`` without ``url``'s password, as written and percent-decoded, should a client library have
    quoted it (an invalid URL in its message, say). It works on a URL that does not parse as well."""
    # By hand, not urlsplit: a bad port or an open bracket makes urlsplit raise, and such a URL is
    # just the one a client quotes back in its error.
    netloc = url.partition("://")[2].partition("/")[0].partition("?")[0].partition("#")[0]
    userinfo = netloc.rpartition("@")[0]
    password = userinfo.partition(":")[2]
    for secret in {password, unquote(password)}:
        if len(secret) >= 3:  # a 1-2 character password would mask random letters of the message
            text = text.replace(secret, MASK)
    return text
