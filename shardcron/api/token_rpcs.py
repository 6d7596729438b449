"""The token RPCs (ListTokens, CreateToken, RevokeToken), mixed into ``SchedulerService``.

Tokens are cluster-wide: the node that receives a call writes ``api_tokens``
itself (no leader, no fence), reloads its own book at once and bumps etcd's
``<prefix>/tokens``, so every other node reloads too, and ends a revoked token's
streams (``token_source.NodeTokens.written``). The interceptor has already
checked that the caller is an admin on ``*`` (``scopes.CALLS``: CLUSTER reach).

A token's name is unique across the token file and the store; a file token
cannot be revoked here (FAILED_PRECONDITION: edit the file). The secret of a new
token is returned once and never stored.
"""

from __future__ import annotations

import grpc

from shardcron import clock
from shardcron.abc import Backend
from shardcron.api import auth
from shardcron.api.routing import Router
from shardcron.api.status import CallFailed
from shardcron.api.token_source import NodeTokens
from shardcron.api.tokens import hash_secret, new_secret, valid_name_reason
from shardcron.errors import InvalidJob
from shardcron.rules.scopes import ALL_NAMESPACES, Role, Token, grant_refused, parse_namespaces
from shardcron.store import tokens as token_store
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import BadRequest

NOT_ENFORCED = (
    "this node checks no tokens (it was started without --auth-token-file), so tokens would "
    "protect nothing; start every node with a token file first"
)


def token_to_proto(token: Token, source: str, created_at_ms: int = 0, created_by: str = "") -> pb.ApiToken:
    names = [ALL_NAMESPACES] if token.everywhere else sorted(token.namespaces)
    return pb.ApiToken(
        name=token.name,
        role=str(token.role),
        namespaces=names,
        created_at_ms=created_at_ms,
        created_by=created_by,
        source=source,
    )


def token_from_proto(p: pb.ApiToken) -> Token:
    """The new token a CreateToken request describes, with a fresh secret's hash; BadRequest naming the field."""
    reason = valid_name_reason(p.name)
    if reason:
        raise BadRequest("token.name", reason)
    try:
        role = Role.parse(p.role)
    except ValueError as e:
        raise BadRequest("token.role", str(e)) from None
    if not p.namespaces:
        raise BadRequest("token.namespaces", "give at least one namespace, or '*' for every namespace")
    try:
        namespaces = parse_namespaces(",".join(p.namespaces), "token.namespaces")
    except InvalidJob as e:
        raise BadRequest("token.namespaces", str(e)) from None
    return Token(p.name, "", role, namespaces)


class TokenRpcs:
    backend: Backend
    router: Router
    node_tokens: NodeTokens | None = None  # set by the API server when it checks tokens

    def _checked_tokens(self) -> NodeTokens:
        if self.node_tokens is None:
            raise CallFailed(grpc.StatusCode.FAILED_PRECONDITION, NOT_ENFORCED)
        return self.node_tokens

    async def ListTokens(
        self, request: pb.ListTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTokensResponse:
        tokens = self._checked_tokens()
        stored = await self.router.blocking(token_store.list_tokens, self.backend.engine)
        answer = [token_to_proto(t, "file") for t in tokens.file_book.by_hash.values()]
        answer += [token_to_proto(s.token, "store", s.created_at_ms, s.created_by) for s in stored]
        answer.sort(key=lambda t: t.name)
        return pb.ListTokensResponse(tokens=answer)

    async def CreateToken(
        self, request: pb.CreateTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTokenResponse:
        tokens = self._checked_tokens()
        wanted = token_from_proto(request.token)
        creator = auth.caller()
        why = grant_refused(wanted, creator)
        if why:
            raise CallFailed(grpc.StatusCode.PERMISSION_DENIED, why)
        if tokens.file_token(wanted.name) is not None:
            raise CallFailed(
                grpc.StatusCode.ALREADY_EXISTS,
                f"a token named {wanted.name!r} is in the nodes' token file; choose another name",
            )
        secret = new_secret()
        token = Token(wanted.name, hash_secret(secret), wanted.role, wanted.namespaces)
        by = creator.name if creator else "(no token)"

        def write() -> token_store.StoredToken:
            try:
                stored = token_store.create_token(self.backend.engine, token, created_by=by, now_ms=clock.wall_ms())
            except token_store.TokenExists as e:
                raise CallFailed(grpc.StatusCode.ALREADY_EXISTS, str(e)) from None
            tokens.written(token.name, clock.wall_ms())
            return stored

        stored = await self.router.blocking(write)
        return pb.CreateTokenResponse(token=token_to_proto(token, "store", stored.created_at_ms, by), secret=secret)

    async def RevokeToken(
        self, request: pb.RevokeTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeTokenResponse:
        tokens = self._checked_tokens()
        if not request.name:
            raise BadRequest("name", "name the token to revoke")
        if tokens.file_token(request.name) is not None:
            raise CallFailed(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"token {request.name!r} comes from the nodes' token file (--auth-token-file): remove "
                "its line from the file on every node and restart them to revoke it",
            )

        def delete() -> None:
            try:
                token_store.revoke_token(self.backend.engine, request.name)
            except token_store.TokenNotFound as e:
                raise CallFailed(grpc.StatusCode.NOT_FOUND, str(e)) from None
            tokens.written(request.name, clock.wall_ms())  # every node ends the token's streams

        await self.router.blocking(delete)
        return pb.RevokeTokenResponse()


__all__ = ["TokenRpcs", "token_from_proto", "token_to_proto"]
