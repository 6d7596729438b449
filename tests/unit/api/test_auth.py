"""api/auth.py's pure parts: the namespaces every RPC's request names, the check, the audit line, and
the identity of a forwarded call; and the node's book of file and store tokens."""

from __future__ import annotations

import logging

import pytest

from shardcron.api import auth
from shardcron.api.auth import NODE_TOKEN_HEADER, WRITE_CALLS, audit_line, check, identify, namespace_of_request
from shardcron.api.peers import FORWARDED_HEADER, Seal
from shardcron.api.security import load_tokens
from shardcron.api.token_source import NodeTokens
from shardcron.api.tokens import hash_secret, parse_token_file, secret_from_authorization
from shardcron.client.channel import ChannelSecurity, token_metadata
from shardcron.errors import InvalidJob
from shardcron.rules.scopes import CALLS, Role, Token
from shardcron.v1 import scheduler_pb2 as pb

RPCS = [m.name for m in pb.DESCRIPTOR.services_by_name["Scheduler"].methods]


def _job(ns: str = "", jid: str = "j") -> pb.Job:
    return pb.Job(id=jid, namespace=ns)


# (method, request naming team-a, expected namespaces); every RPC of the proto is here (test below).
CASES = [
    ("PutJob", pb.PutJobRequest(job=_job("team-a")), ("team-a",)),
    ("PutJobs", pb.PutJobsRequest(jobs=[_job("team-a"), _job("team-b"), _job("team-a")]), ("team-a", "team-b")),
    ("GetJob", pb.GetJobRequest(id="j", namespace="team-a"), ("team-a",)),
    ("DeleteJob", pb.DeleteJobRequest(id="j", namespace="team-a"), ("team-a",)),
    ("ListJobs", pb.ListJobsRequest(namespace="*"), ("*",)),
    ("PauseJob", pb.PauseJobRequest(id="j", namespace="team-a"), ("team-a",)),
    ("ResumeJob", pb.ResumeJobRequest(id="j", namespace="team-a"), ("team-a",)),
    ("TriggerJob", pb.TriggerJobRequest(id="j", namespace="team-a"), ("team-a",)),
    ("AckTick", pb.AckTickRequest(id="j", namespace="team-a"), ("team-a",)),
    ("BackfillJob", pb.BackfillJobRequest(id="j", namespace="team-a"), ("team-a",)),
    ("GetBackfill", pb.GetBackfillRequest(id="b", namespace="team-a"), ("team-a",)),
    ("ListBackfills", pb.ListBackfillsRequest(namespace="team-a"), ("team-a",)),
    ("ListTicks", pb.ListTicksRequest(job_id="j", namespace="team-a"), ("team-a",)),
    ("ListDeadlineMisses", pb.ListDeadlineMissesRequest(namespace="team-a"), ("team-a",)),
    ("WatchTicks", pb.WatchTicksRequest(namespace="*"), ("*",)),
    ("GetShards", pb.GetShardsRequest(), ()),
    # Member nodes only; each PutJob it carries is checked on its own (api/put_each.py).
    ("PutJobEach", pb.PutJobEachRequest(calls=[pb.PutJobRequest(job=_job("team-a"))]), ()),
    ("PutCalendar", pb.PutCalendarRequest(calendar=pb.Calendar(name="c")), ()),
    ("GetCalendar", pb.GetCalendarRequest(name="c"), ()),
    ("ListCalendars", pb.ListCalendarsRequest(), ()),
    ("DeleteCalendar", pb.DeleteCalendarRequest(name="c"), ()),
    ("ListNamespaces", pb.ListNamespacesRequest(), ()),
    ("GetNamespace", pb.GetNamespaceRequest(name="team-a"), ("team-a",)),
    ("CreateNamespace", pb.CreateNamespaceRequest(namespace=pb.Namespace(name="team-a")), ()),
    ("UpdateNamespace", pb.UpdateNamespaceRequest(namespace=pb.Namespace(name="team-a")), ()),
    ("DeleteNamespace", pb.DeleteNamespaceRequest(name="team-a"), ()),
    ("ListTokens", pb.ListTokensRequest(), ()),
    ("CreateToken", pb.CreateTokenRequest(token=pb.ApiToken(name="t")), ()),
    ("RevokeToken", pb.RevokeTokenRequest(name="t"), ()),
]


def test_every_rpc_of_the_proto_has_a_case_and_a_rule():
    assert sorted(m for m, _, _ in CASES) == sorted(RPCS)
    for method in RPCS:
        assert method in CALLS


@pytest.mark.parametrize("method,request_,expected", CASES, ids=[c[0] for c in CASES])
def test_namespace_of_request(method, request_, expected):
    assert namespace_of_request(method, request_) == expected


@pytest.mark.parametrize(
    "method,request_",
    [
        ("PutJob", pb.PutJobRequest(job=_job())),
        ("GetJob", pb.GetJobRequest(id="j")),
        ("WatchTicks", pb.WatchTicksRequest()),
        ("PutJobs", pb.PutJobsRequest(jobs=[_job()])),
        ("PutJobs", pb.PutJobsRequest()),
    ],
)
def test_an_empty_namespace_is_default(method, request_):
    assert namespace_of_request(method, request_) == ("default",)


def test_a_malformed_namespace_is_named():
    with pytest.raises(InvalidJob, match="namespace"):
        namespace_of_request("GetJob", pb.GetJobRequest(id="j", namespace="Bad Name"))


def _token(name: str, role: Role, *namespaces: str) -> Token:
    return Token(name, hash_secret(name + "-secret"), role, frozenset(namespaces))


TEAM_A = _token("team-a-writer", Role.WRITE, "team-a")
READER = _token("team-a-reader", Role.READ, "team-a")
ADMIN = _token("ops", Role.ADMIN, "*")


@pytest.mark.parametrize(
    "token,method,request_,denied_with",
    [
        (TEAM_A, "PutJob", pb.PutJobRequest(job=_job("team-a")), None),
        (TEAM_A, "PutJob", pb.PutJobRequest(job=_job("team-b")), "namespace 'team-b' needs role write"),
        (TEAM_A, "PutJobs", pb.PutJobsRequest(jobs=[_job("team-a"), _job("team-b")]), "'team-b'"),
        (TEAM_A, "GetJob", pb.GetJobRequest(id="j"), "namespace 'default'"),
        (TEAM_A, "ListJobs", pb.ListJobsRequest(namespace="*"), None),  # filtered by may_see
        (READER, "DeleteJob", pb.DeleteJobRequest(id="j", namespace="team-a"), "role write"),
        # validating a write needs the write's permission: a read-only token learns nothing of the rules
        (READER, "PutJobs", pb.PutJobsRequest(jobs=[_job("team-a")], validate_only=True), "role write"),
        (TEAM_A, "PutJobs", pb.PutJobsRequest(jobs=[_job("team-a")], validate_only=True), None),
        (READER, "WatchTicks", pb.WatchTicksRequest(namespace="team-a"), None),
        (TEAM_A, "CreateToken", pb.CreateTokenRequest(token=pb.ApiToken(name="t")), "every namespace ('*')"),
        (ADMIN, "CreateToken", pb.CreateTokenRequest(token=pb.ApiToken(name="t")), None),
        (TEAM_A, "GetShards", pb.GetShardsRequest(), None),
    ],
)
def test_check(token, method, request_, denied_with):
    reason = check(token, method, request_)
    if denied_with is None:
        assert reason is None
    else:
        assert reason is not None and denied_with in reason and token.name in reason


@pytest.mark.parametrize("validate_only,logged", [(False, True), (True, False)])
def test_a_putjobs_that_only_validated_wrote_nothing_and_is_not_audit_logged(caplog, validate_only, logged):
    request = pb.PutJobsRequest(jobs=[_job("team-a", "nightly")], validate_only=validate_only)
    answer = pb.PutJobsResponse(results=[pb.PutJobResult(id="nightly", code=0)])
    with caplog.at_level(logging.INFO, logger="shardcron.audit"):
        auth.audit_applied("PutJobs", TEAM_A, request, answer, auth.track_applied())
    assert ("target=nightly" in caplog.text) is logged


def test_the_audit_line_names_the_call_token_namespace_and_target():
    r = pb.DeleteJobRequest(id="nightly", namespace="team-a")
    assert audit_line("DeleteJob", TEAM_A, r) == "call=DeleteJob token=team-a-writer namespace=team-a target=nightly"
    assert (
        audit_line("RevokeToken", ADMIN, pb.RevokeTokenRequest(name="ci"), "denied")
        == "call=RevokeToken token=ops namespace=- target=ci denied"
    )
    assert {
        "PutJob",
        "PutJobs",
        "DeleteJob",
        "PauseJob",
        "ResumeJob",
        "TriggerJob",
        "AckTick",
        "BackfillJob",
        "PutCalendar",
        "DeleteCalendar",
        "CreateNamespace",
        "UpdateNamespace",
        "DeleteNamespace",
        "CreateToken",
        "RevokeToken",
    } == WRITE_CALLS


FILE = """\
ops        {ops}  admin  *
node-ro    {node}  read   *
legacy-bare-secret
"""


def _book() -> NodeTokens:
    text = FILE.format(ops=hash_secret("ops-secret"), node=hash_secret("node-secret"))
    store = [
        _token("team-a-writer", Role.WRITE, "team-a"),
        Token("ops", hash_secret("a-store-ops"), Role.ADMIN, frozenset({"*"})),
    ]  # the file's name wins
    tokens = NodeTokens(parse_token_file(text), lambda: store)
    tokens.reload()
    return tokens


def test_the_book_holds_the_file_and_the_store():
    tokens = _book()
    assert tokens.identify("ops-secret").name == "ops"
    assert tokens.identify("legacy-bare-secret").role is Role.ADMIN
    assert tokens.identify("team-a-writer-secret").namespaces == frozenset({"team-a"})
    assert tokens.identify("a-store-ops") is None  # a store token cannot shadow a file token's name
    assert tokens.identify("nope") is None


def test_a_failed_reload_keeps_the_tokens_read_before(caplog):
    tokens = _book()
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("store down")

    tokens._load_store = broken
    with caplog.at_level(logging.WARNING):
        tokens.reload()
    assert calls and tokens.identify("team-a-writer-secret") is not None
    assert "keeping the ones read before" in caplog.text


def _md(*pairs):
    return tuple(pairs)


SEAL = Seal(b"the cluster's forwarding secret")


def test_identify_a_direct_call():
    tokens = _book()
    token, secret, forwarded = identify(tokens, _md(("authorization", "Bearer team-a-writer-secret")), SEAL)
    assert token.name == "team-a-writer" and secret == "team-a-writer-secret" and not forwarded
    assert identify(tokens, _md(("authorization", "Bearer wrong")), SEAL) == (None, "wrong", False)
    assert identify(tokens, (), SEAL) == (None, None, False)


@pytest.mark.parametrize(
    "value",
    [
        "Bearer team-a-writer-secret",
        "bearer team-a-writer-secret",
        "BEARER\tteam-a-writer-secret",
        "team-a-writer-secret",
        " team-a-writer-secret\n",
        "Bearer team-a-writer-secret\t",
        "\tbearer  team-a-writer-secret ",
    ],
)
def test_the_api_reads_a_token_with_any_bearer_case_or_bare_and_strips_whitespace(value):
    token, secret, _ = identify(_book(), _md(("authorization", value)), SEAL)
    assert token is not None and token.name == "team-a-writer" and secret == "team-a-writer-secret"


def test_a_forwarded_call_is_never_wider_than_its_caller_nor_its_node():
    tokens = _book()

    def fwd(secret):
        return SEAL.marker(secret)

    # An admin caller through a read-only node: read.
    token, _, forwarded = identify(
        tokens,
        _md(fwd("ops-secret"), ("authorization", "Bearer ops-secret"), (NODE_TOKEN_HEADER, "Bearer node-secret")),
        SEAL,
    )
    assert forwarded and token.name == "ops" and token.role is Role.READ
    assert check(token, "PutJob", pb.PutJobRequest(job=_job("team-a"))) is not None
    # A team caller through an admin node: the team's scope.
    token, _, _ = identify(
        tokens,
        _md(
            fwd("team-a-writer-secret"),
            ("authorization", "Bearer team-a-writer-secret"),
            (NODE_TOKEN_HEADER, "Bearer ops-secret"),
        ),
        SEAL,
    )
    assert token.role is Role.WRITE and token.namespaces == frozenset({"team-a"})
    # The node's token alone: no rights at all.
    token, _, _ = identify(tokens, _md(fwd(None), (NODE_TOKEN_HEADER, "Bearer ops-secret")), SEAL)
    assert token is not None and not token.namespaces
    assert check(token, "GetJob", pb.GetJobRequest(id="j")) is not None
    # Neither known: unauthenticated.
    assert identify(tokens, _md(fwd("nope"), ("authorization", "Bearer nope")), SEAL)[0] is None


@pytest.mark.parametrize(
    "marker",
    [
        "1",
        "v1.",
        "v1." + "0" * 64,
        Seal(b"another cluster's secret!").seal("ops-secret"),
        SEAL.seal("team-a-writer-secret"),
    ],
)  # the last: sealed for another caller
def test_a_marker_without_this_clusters_seal_for_this_caller_is_ignored(marker):
    """A client that sends the forwarded marker itself is a direct caller: its own token, unnarrowed by any
    node token and not trusted as a peer (so it is routed, limited and audit-logged)."""
    token, secret, forwarded = identify(
        _book(),
        _md(
            (FORWARDED_HEADER, marker),
            ("authorization", "Bearer ops-secret"),
            (NODE_TOKEN_HEADER, "Bearer node-secret"),
        ),
        SEAL,
    )
    assert not forwarded and token.name == "ops" and token.role is Role.ADMIN and secret == "ops-secret"


def test_may_see_without_a_caller_sees_everything():
    assert auth.caller() is None and auth.may_see("team-b") and auth.readable_namespaces() is None


@pytest.mark.parametrize(
    "value, secret",
    [
        ("Bearer sct_abc", "sct_abc"),
        ("bearer sct_abc", "sct_abc"),
        ("BEARER sct_abc", "sct_abc"),
        ("bEaReR\tsct_abc", "sct_abc"),
        ("sct_abc", "sct_abc"),
        (" sct_abc", "sct_abc"),
        ("sct_abc\n", "sct_abc"),
        ("\tBearer   sct_abc \r\n", "sct_abc"),
        # no secret named
        (None, None),
        ("", None),
        ("   ", None),
        ("Bearer", None),
        ("bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer a b", None),
    ],
)
def test_one_reading_of_an_authorization_value_for_the_api_and_the_dashboard(value, secret):
    assert secret_from_authorization(value) == secret


@pytest.mark.parametrize(
    "given, kept",
    [("sct_abc\n", "sct_abc"), (" sct_abc\t", "sct_abc"), ("\n", None), ("sct_abc", "sct_abc"), (None, None)],
)
def test_a_channels_token_is_the_secret_without_surrounding_whitespace(given, kept):
    sec = ChannelSecurity(token=given)
    assert sec.token == kept
    assert token_metadata(sec) == ((("authorization", f"Bearer {kept}"),) if kept else ())


def test_a_token_file_with_a_byte_order_mark_and_crlf_lines_is_read(tmp_path):
    path = tmp_path / "tokens"
    path.write_bytes(b"\xef\xbb\xbfops " + hash_secret("ops-secret").encode() + b" admin *\r\nlegacy-secret \r\n")
    book, bare = load_tokens(str(path))
    assert book.identify("ops-secret").name == "ops" and book.identify("legacy-secret") is not None
    assert bare == "legacy-secret"


def test_a_reload_that_finds_a_token_gone_tells_its_subscribers_once():
    store = [_token("team-a-writer", Role.WRITE, "team-a"), _token("team-b-reader", Role.READ, "team-b")]
    tokens = NodeTokens(
        parse_token_file(FILE.format(ops=hash_secret("ops-secret"), node=hash_secret("node-secret"))),
        lambda: list(store),
    )
    tokens.reload()
    heard: list[frozenset[str]] = []
    unsubscribe = tokens.on_revoked(heard.append)
    tokens.reload()
    assert heard == [], "nothing gone, nothing told"
    del store[0]
    tokens.reload()
    tokens.reload()
    assert heard == [frozenset({hash_secret("team-a-writer-secret")})]
    unsubscribe()
    store.clear()
    tokens.reload()
    assert len(heard) == 1, "an unsubscribed listener hears nothing more"
