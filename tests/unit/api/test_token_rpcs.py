"""api/token_rpcs.py's pure parts: a CreateToken request read into a token (or an error naming the
field), and the rule that a token never grants more than its creator holds."""

from __future__ import annotations

import pytest

from shardcron.api.token_rpcs import token_from_proto, token_to_proto
from shardcron.rules.scopes import Role, Token, grant_refused
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import BadRequest


def _req(name="ci", role="write", namespaces=("team-a",)) -> pb.ApiToken:
    return pb.ApiToken(name=name, role=role, namespaces=list(namespaces))


def test_a_request_becomes_a_token():
    t = token_from_proto(_req(namespaces=["team-b", "team-a"]))
    assert (t.name, t.role, t.namespaces) == ("ci", Role.WRITE, frozenset({"team-a", "team-b"}))
    assert token_from_proto(_req(role="ADMIN", namespaces=["*"])).everywhere


@pytest.mark.parametrize(
    "request_,field,says",
    [
        (_req(name=""), "token.name", "1 to 64"),
        (_req(name="has space"), "token.name", "letters, digits"),
        (_req(role="owner"), "token.role", "read, write, admin"),
        (_req(namespaces=()), "token.namespaces", "at least one"),
        (_req(namespaces=("Team A",)), "token.namespaces", "lowercase"),
        (_req(namespaces=("*", "team-a")), "token.namespaces", "alone"),
    ],
)
def test_a_bad_request_names_the_field(request_, field, says):
    with pytest.raises(BadRequest) as e:
        token_from_proto(request_)
    assert field in str(e.value) and says in str(e.value)


def _t(role: Role, *namespaces: str) -> Token:
    return Token("x", "", role, frozenset(namespaces))


@pytest.mark.parametrize(
    "new,creator,refused",
    [
        (_t(Role.WRITE, "team-a"), _t(Role.ADMIN, "*"), False),
        (_t(Role.ADMIN, "*"), _t(Role.ADMIN, "*"), False),
        (_t(Role.ADMIN, "team-a"), _t(Role.WRITE, "*"), True),
        (_t(Role.READ, "team-b"), _t(Role.ADMIN, "team-a"), True),
        (_t(Role.READ, "*"), _t(Role.ADMIN, "team-a"), True),
        (_t(Role.READ, "team-a"), _t(Role.ADMIN, "team-a", "team-b"), False),
        (_t(Role.ADMIN, "*"), None, False),  # auth off: nothing to compare with
    ],
)
def test_a_token_never_grants_more_than_its_creator(new, creator, refused):
    assert (grant_refused(new, creator) is not None) == refused


def test_the_answer_shows_star_alone_and_never_the_hash():
    p = token_to_proto(Token("ops", "sha256:" + "0" * 64, Role.ADMIN, frozenset({"*"})), "file")
    assert list(p.namespaces) == ["*"] and p.source == "file" and "sha256" not in str(p)
