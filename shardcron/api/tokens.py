"""Token secrets, their stored hashes, and the token file that maps each token to a scope.

A secret is ``sct_`` and 43 URL-safe characters: 32 bytes from ``secrets``. Only its
hash is ever stored (file or store table): ``sha256:`` and the hex SHA-256 of its
UTF-8 bytes. A plain SHA-256 and not a slow password hash: a secret of 256 random
bits leaves nothing to guess, and every call hashes the token it presents, so the
hash must be cheap. A node finds a caller's token by that hash (``TokenBook.identify``):
the timing of a lookup by the hash of a guess tells nothing about any stored
secret, and the found hash is compared again with ``hmac.compare_digest``.

The token file, one token per line, fields separated by spaces or tabs::

    # name      secret hash                                                               role   namespaces
    ci-billing  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  write  billing
    dashboards  sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  read   billing,search
    ops         sha256:fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13  admin  *

Blank lines and lines starting with ``#`` are skipped. A line of one field is a
token of the file before namespaces (``--auth-token-file``: the secret itself,
with full power): it is read as ``admin`` on ``*``, named ``legacy-`` and the first
8 hex digits of its hash (stable across edits of the file, and no part of the
secret), so an existing file keeps working. Every error names the source and the
line, and never repeats a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from shardcron.errors import ConfigError, InvalidJob
from shardcron.rules.scopes import ALL_NAMESPACES, Role, Token, parse_namespaces

SECRET_PREFIX = "sct_"  # recognisable in a leaked log or a secret scanner's rules
HASH_PREFIX = "sha256:"

_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_FIELDS = "NAME sha256:HASH ROLE NAMESPACES"


class TokenFileError(ConfigError):
    """A line of a token file is malformed; the message names the source and the line."""


def valid_name_reason(name: str) -> str | None:
    """None when ``name`` may name a token (file or store), else why not."""
    if _NAME.fullmatch(name):
        return None
    return (
        f"the name {name[:64]!r} must be 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
    )


def secret_from_authorization(value: str | None) -> str | None:
    """The secret an ``authorization`` value names, without surrounding whitespace: ``Bearer <secret>``
    (the scheme in any case) or the bare secret. None when it names none: empty, ``Bearer`` alone, another
    scheme, or words a secret cannot hold (a secret has no whitespace). The API and the dashboard both read
    tokens with it, so a token one accepts the other accepts too."""
    words = (value or "").split()
    if len(words) == 2 and words[0].lower() == "bearer":
        return words[1]
    if len(words) == 1 and words[0].lower() != "bearer":
        return words[0]
    return None


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    """What is stored for ``secret``: ``sha256:`` and the hex digest of its UTF-8 bytes."""
    return HASH_PREFIX + hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(secret: str, secret_hash: str) -> bool:
    """Whether ``secret`` is the one ``secret_hash`` was made from, compared in constant time."""
    return hmac.compare_digest(hash_secret(secret).encode(), secret_hash.encode())


def token_line(token: Token) -> str:
    """``token`` as a line of the token file (what ``shardcron tokens create`` prints to append)."""
    where = ALL_NAMESPACES if token.everywhere else ",".join(sorted(token.namespaces))
    return f"{token.name}  {token.secret_hash}  {token.role}  {where}"


@dataclass(frozen=True)
class TokenBook:
    """The tokens a node accepts, found by the hash of the secret a call presents."""

    by_hash: dict[str, Token]

    @classmethod
    def of(cls, tokens: Iterable[Token]) -> TokenBook:
        return cls({t.secret_hash: t for t in tokens})

    def identify(self, secret: str) -> Token | None:
        token = self.by_hash.get(hash_secret(secret))
        return token if token is not None and secret_matches(secret, token.secret_hash) else None

    def __len__(self) -> int:
        return len(self.by_hash)


def parse_token_file(text: str, source: str = "token file") -> TokenBook:
    """Every token of a token file's ``text``; ``TokenFileError`` naming ``source`` and the line otherwise."""
    tokens: list[Token] = []
    line_of_name: dict[str, int] = {}
    line_of_hash: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        where = f"{source} line {number}"
        token = _legacy(fields[0]) if len(fields) == 1 else _parse_line(fields, where)
        if token.name in line_of_name:
            raise TokenFileError(f"{where}: the name {token.name!r} is already used on line {line_of_name[token.name]}")
        if token.secret_hash in line_of_hash:
            first, name = line_of_hash[token.secret_hash]
            raise TokenFileError(f"{where}: the same secret as line {first} ({name!r}); one secret, one identity")
        line_of_name[token.name] = number
        line_of_hash[token.secret_hash] = (number, token.name)
        tokens.append(token)
    if not tokens:
        raise TokenFileError(f"{source} holds no token")
    return TokenBook.of(tokens)


def _legacy(secret: str) -> Token:
    secret_hash = hash_secret(secret)
    return Token(f"legacy-{secret_hash[len(HASH_PREFIX) :][:8]}", secret_hash, Role.ADMIN, frozenset({ALL_NAMESPACES}))


def _parse_line(fields: list[str], where: str) -> Token:
    if len(fields) != 4:
        raise TokenFileError(f"{where}: expected {_FIELDS} (4 fields), or one legacy token; got {len(fields)} fields")
    name, secret_hash, role, namespaces = fields
    if not _NAME.fullmatch(name):
        raise TokenFileError(
            f"{where}: the name {name[:64]!r} must be 1 to 64 letters, digits, '.', '_', '@' or "
            "'-', starting with a letter or digit"
        )
    if not _HASH.fullmatch(secret_hash):  # never echoed: it may be a secret pasted by mistake
        raise TokenFileError(
            f"{where}: the second field must be {HASH_PREFIX} and 64 lowercase hex digits, the hash "
            "of the secret (the file stores no secret)"
        )
    try:
        return Token(name, secret_hash, Role.parse(role), parse_namespaces(namespaces))
    except (ValueError, InvalidJob) as e:
        raise TokenFileError(f"{where}: {e}") from None


__all__ = [
    "HASH_PREFIX",
    "SECRET_PREFIX",
    "TokenBook",
    "TokenFileError",
    "hash_secret",
    "new_secret",
    "parse_token_file",
    "secret_from_authorization",
    "secret_matches",
    "token_line",
    "valid_name_reason",
]
