"""Scope checks: role x call x namespace over every RPC, the reasons sent, and forwarding that never widens."""

import argparse
import itertools

import pytest

from shardcron.cli import build_parser
from shardcron.rules.scopes import (
    ALL_NAMESPACES,
    CALLS,
    CLI_ACTIONS,
    LOCAL_COMMANDS,
    Reach,
    Role,
    Token,
    authorize,
    forwarded_identity,
    may_read,
    parse_namespaces,
)
from shardcron.spec.namespaces import InvalidNamespace
from shardcron.v1 import scheduler_pb2

PROTO_RPCS = set(scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].methods_by_name)

# The issue's own words, written out again here so that a slip in CALLS is caught.
READ = {
    "GetJob",
    "ListJobs",
    "ListTicks",
    "ListDeadlineMisses",
    "WatchTicks",
    "GetBackfill",
    "ListBackfills",
    "GetShards",
    "GetCalendar",
    "ListCalendars",
}
WRITE = {
    "PutJob",
    "PutJobs",
    "PutJobEach",
    "DeleteJob",
    "PauseJob",
    "ResumeJob",
    "TriggerJob",
    "AckTick",
    "BackfillJob",
}
ADMIN = {
    "PutCalendar",
    "DeleteCalendar",
    "ListNamespaces",
    "GetNamespace",
    "CreateNamespace",
    "UpdateNamespace",
    "DeleteNamespace",
    "ListTokens",
    "CreateToken",
    "RevokeToken",
    "Drain",
    "Reshard",
}
NEEDS = {**dict.fromkeys(READ, Role.READ), **dict.fromkeys(WRITE, Role.WRITE), **dict.fromkeys(ADMIN, Role.ADMIN)}
# Cluster-wide data any tenant may read / what every namespace shares (only a '*' token may change it).
# PutJobEach: member nodes only; each PutJob it carries is then checked in its own namespace.
ANY = {"GetShards", "GetCalendar", "ListCalendars", "ListNamespaces", "PutJobEach"}
CLUSTER = {
    "PutCalendar",
    "DeleteCalendar",
    "CreateNamespace",
    "UpdateNamespace",
    "DeleteNamespace",
    "ListTokens",
    "CreateToken",
    "RevokeToken",
    "Drain",
    "Reshard",
}


def token(role: Role, *namespaces: str, name: str = "t") -> Token:
    return Token(name, "sha256:" + "0" * 64, role, frozenset(namespaces))


TOKENS = [token(role, *nss) for role in Role for nss in [("team-a",), ("team-a", "team-c"), (ALL_NAMESPACES,)]]
TOKENS.append(token(Role.ADMIN))  # no namespace at all
NAMESPACES = ["team-a", "team-b", "default", ALL_NAMESPACES]


def expected(tok: Token, call: str, ns: str) -> bool:
    if tok.role < NEEDS[call] or not tok.namespaces:
        return False
    if call in CLUSTER:
        return ALL_NAMESPACES in tok.namespaces
    if call in ANY:
        return True
    if ns == ALL_NAMESPACES:
        return NEEDS[call] is Role.READ
    return ALL_NAMESPACES in tok.namespaces or ns in tok.namespaces


def test_every_rpc_of_the_proto_has_a_rule():
    assert PROTO_RPCS - set(CALLS) == set(), "an RPC without a role: add it to scopes.CALLS"


def test_planned_calls_are_exactly_those_not_in_the_proto_yet():
    assert {c for c, r in CALLS.items() if r.planned} == set(CALLS) - PROTO_RPCS


def test_the_table_is_the_issues():
    assert {c: r.role for c, r in CALLS.items()} == NEEDS
    assert {c for c, r in CALLS.items() if r.reach is Reach.ANY} == ANY
    assert {c for c, r in CALLS.items() if r.reach is Reach.CLUSTER} == CLUSTER


def _leaves(parser: argparse.ArgumentParser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path)
    for a in subs:
        for name, sub in a.choices.items():
            yield from _leaves(sub, (*path, name))


def test_every_cli_command_is_mapped_to_its_calls_or_is_local():
    commands = set(_leaves(build_parser()))
    unmapped = commands - set(CLI_ACTIONS) - LOCAL_COMMANDS
    assert unmapped == set(), "a CLI command with no call: add it to scopes.CLI_ACTIONS or LOCAL_COMMANDS"
    assert not set(CLI_ACTIONS) & LOCAL_COMMANDS
    assert all(call in CALLS for calls in CLI_ACTIONS.values() for call in calls)


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("tok", TOKENS, ids=lambda t: f"{t.role}@{','.join(sorted(t.namespaces)) or '-'}")
@pytest.mark.parametrize("ns", NAMESPACES)
def test_role_x_call_x_namespace(tok, call, ns):
    denied = authorize(tok, call, ns)
    assert (denied is None) == expected(tok, call, ns), denied
    if denied is not None:
        assert call in denied.reason and f"role {NEEDS[call]}" in denied.reason
        assert denied.role_needed is NEEDS[call]
        if call not in ANY | CLUSTER and ns != ALL_NAMESPACES and tok.namespaces:
            assert f"namespace {ns!r}" in denied.reason


@pytest.mark.parametrize(
    "tok, call, ns, reason",
    [
        (
            token(Role.READ, "team-a", name="dash"),
            "PutJob",
            "team-a",
            "PutJob in namespace 'team-a' needs role write there; token 'dash' has role read on namespaces team-a",
        ),
        (
            token(Role.ADMIN, "team-a", name="ci"),
            "GetJob",
            "team-b",
            "GetJob in namespace 'team-b' needs role read there; token 'ci' has role admin on namespaces team-a",
        ),
        (
            token(Role.ADMIN, "team-a", name="lead"),
            "PutCalendar",
            "team-a",
            "PutCalendar acts on the whole cluster: it needs role admin on every namespace ('*'); "
            "token 'lead' has role admin on namespaces team-a",
        ),
        (
            token(Role.WRITE, ALL_NAMESPACES, name="deploy"),
            "Drain",
            "default",
            "Drain acts on the whole cluster: it needs role admin on every namespace ('*'); "
            "token 'deploy' has role write on every namespace",
        ),
        (
            token(Role.ADMIN, ALL_NAMESPACES, name="ops"),
            "DeleteJob",
            ALL_NAMESPACES,
            "DeleteJob needs role write in one named namespace, not '*'",
        ),
    ],
)
def test_reasons_are_what_the_api_sends(tok, call, ns, reason):
    assert authorize(tok, call, ns).reason == reason


def test_an_unknown_call_is_denied():
    denied = authorize(token(Role.ADMIN, ALL_NAMESPACES), "DropEverything", "default")
    assert denied is not None and "DropEverything" in denied.reason


def test_a_missing_namespace_is_denied_not_guessed():
    assert authorize(token(Role.ADMIN, "team-a"), "GetJob", None) is not None


@pytest.mark.parametrize(
    "tok, ns, visible",
    [
        (token(Role.READ, "team-a"), "team-a", True),
        (token(Role.ADMIN, "team-a"), "team-b", False),
        (token(Role.READ, ALL_NAMESPACES), "team-b", True),
        (token(Role.READ), "default", False),
    ],
)
def test_may_read_filters_lists_and_watches(tok, ns, visible):
    assert may_read(tok, ns) is visible


# -- forwarding -------------------------------------------------------------------

CALLERS = [None, *TOKENS]
FORWARDERS = [None, token(Role.ADMIN, ALL_NAMESPACES, name="node"), token(Role.WRITE, "team-a", "team-b", name="node")]


@pytest.mark.parametrize("caller", CALLERS, ids=lambda t: "none" if t is None else f"{t.role}@{sorted(t.namespaces)}")
@pytest.mark.parametrize(
    "forwarder", FORWARDERS, ids=lambda t: "none" if t is None else f"{t.role}@{sorted(t.namespaces)}"
)
def test_forwarding_never_widens(caller, forwarder):
    seen = forwarded_identity(caller, forwarder)
    for call, ns in itertools.product(CALLS, NAMESPACES):
        if authorize(seen, call, ns) is None:
            assert caller is not None and authorize(caller, call, ns) is None, (call, ns)
            assert forwarder is None or authorize(forwarder, call, ns) is None, (call, ns)
    if caller is not None:
        assert seen.name == caller.name  # the audit log names the caller, not the node


def test_a_forwarded_call_without_the_callers_token_gets_nothing_from_the_node():
    seen = forwarded_identity(None, token(Role.ADMIN, ALL_NAMESPACES, name="node"))
    assert all(authorize(seen, call, ns) is not None for call in CALLS for ns in NAMESPACES)


def test_forwarding_keeps_the_callers_rights_through_a_full_power_node():
    caller = token(Role.WRITE, "team-a", name="ci")
    assert forwarded_identity(caller, token(Role.ADMIN, ALL_NAMESPACES)) == caller


@pytest.mark.parametrize(
    "text, expected",
    [
        ("team-a", {"team-a"}),
        ("team-a, team-b", {"team-a", "team-b"}),
        ("*", {"*"}),
    ],
)
def test_parse_namespaces(text, expected):
    assert parse_namespaces(text) == frozenset(expected)


@pytest.mark.parametrize(
    "text, says",
    [
        ("team-a,", "empty name"),
        ("*,team-a", "give it alone"),
        ("Team", "lowercase"),
    ],
)
def test_parse_namespaces_errors(text, says):
    with pytest.raises(InvalidNamespace, match=says) as e:
        parse_namespaces(text, "namespaces")
    assert e.value.field == "namespaces"
