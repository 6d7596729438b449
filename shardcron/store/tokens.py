"""API tokens in the store (``api_tokens``): created and revoked through the API, read by every node.

Cluster-wide, not sharded: the node that receives CreateToken or RevokeToken
writes the row itself, without a fence. Only the hash of a secret is stored. A
node keeps the table in memory (``api/auth.py``'s book), reloaded every few
seconds, so a revocation reaches every node within that bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy import exc as sa_exc

from shardcron.errors import ShardcronError
from shardcron.rules.scopes import ALL_NAMESPACES, Role, Token, parse_namespaces
from shardcron.store.engine import reading, writing
from shardcron.store.schema import api_tokens


class TokenExists(ShardcronError):
    def __init__(self, name: str):
        super().__init__(f"a token named {name!r} already exists; revoke it first or choose another name")
        self.name = name


class TokenNotFound(ShardcronError):
    def __init__(self, name: str):
        super().__init__(f"no token named {name!r} in the store; `shardcron tokens list` shows the tokens")
        self.name = name


@dataclass(frozen=True)
class StoredToken:
    token: Token
    created_at_ms: int
    created_by: str


def namespaces_text(namespaces: frozenset[str]) -> str:
    return ALL_NAMESPACES if ALL_NAMESPACES in namespaces else ",".join(sorted(namespaces))


def create_token(engine: Engine, token: Token, *, created_by: str, now_ms: int) -> StoredToken:
    """Insert ``token``; ``TokenExists`` when its name is taken (a hash collision is a bug: secrets are random)."""
    try:
        with writing(engine) as conn:
            conn.execute(
                api_tokens.insert().values(
                    name=token.name,
                    secret_hash=token.secret_hash,
                    role=str(token.role),
                    namespaces=namespaces_text(token.namespaces),
                    created_at_ms=now_ms,
                    created_by=created_by,
                )
            )
    except sa_exc.IntegrityError:
        raise TokenExists(token.name) from None
    return StoredToken(token, now_ms, created_by)


def revoke_token(engine: Engine, name: str) -> None:
    """Delete the row: every node refuses the token once its book reloads. ``TokenNotFound`` when none."""
    with writing(engine) as conn:
        if conn.execute(api_tokens.delete().where(api_tokens.c.name == name)).rowcount == 0:
            raise TokenNotFound(name)


def list_tokens(engine: Engine) -> list[StoredToken]:
    with reading(engine) as conn:
        rows = conn.execute(select(api_tokens).order_by(api_tokens.c.name)).all()
    return [
        StoredToken(
            Token(r.name, r.secret_hash, Role.parse(r.role), parse_namespaces(r.namespaces)),
            r.created_at_ms,
            r.created_by,
        )
        for r in rows
    ]


__all__ = [
    "StoredToken",
    "TokenExists",
    "TokenNotFound",
    "create_token",
    "list_tokens",
    "namespaces_text",
    "revoke_token",
]
