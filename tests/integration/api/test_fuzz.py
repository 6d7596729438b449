"""Every RPC of the API, fuzzed on a real node (real etcd, real SQLite) that checks tokens and allows Python jobs.

The RPCs are read from the generated descriptor, so a new one is fuzzed without a change here. Each call
sends a random message of the RPC's request type (``fuzz_strategies.messages``: extremes per field type,
strings each field is checked for, nested messages) or raw bytes that are no message at all, with an admin,
a write or a read token, a token the node does not know, or none, sometimes with a peer's forwarding
metadata forged; and jobs the spec accepts at its edges are put for real. No answer may be INTERNAL or UNKNOWN,
the node's log must hold no traceback, and afterwards the node must still schedule: a job ``every 1s``
created before the fuzzing keeps getting ticks.

The liveness check runs with the token file's admin, which no RPC can revoke, on a job in a namespace
whose name the fuzzer cannot guess; anything the fuzzer may have changed on it is put back first.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter

import grpc
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from shardcron.api.auth import NODE_TOKEN_HEADER
from shardcron.api.peers import FORWARDED_HEADER
from shardcron.api.tokens import hash_secret
from shardcron.dev.testing.cluster import wait_until
from shardcron.errors import InvalidJob
from shardcron.model import Job
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_to_proto
from tests.support.clusters import assert_no_traceback
from tests.support.fuzz_strategies import fuzz_settings, job_dicts, messages, raw_payloads
from tests.support.tenancy import ensure_namespaces, token_client

pytestmark = [pytest.mark.cluster, pytest.mark.fuzz]

SERVICE = pb.DESCRIPTOR.services_by_name["Scheduler"]
METHODS = sorted(SERVICE.methods, key=lambda m: m.name)


def _holds_a_job(message, seen=()) -> bool:
    if message.full_name == pb.Job.DESCRIPTOR.full_name:
        return True
    return any(
        f.message_type is not None
        and f.message_type.full_name not in seen
        and _holds_a_job(f.message_type, (*seen, message.full_name))
        for f in message.fields
    )


# RPCs that carry a job get four draws in the mix: the job spec is where most of the input is.
WEIGHTED_METHODS = [m for m in METHODS for _ in range(4 if _holds_a_job(m.input_type) else 1)]
ADMIN = "fuzz-admin-" + uuid.uuid4().hex
NODE = "fuzz-node-" + uuid.uuid4().hex
# The namespace the fuzzer's strings name most (tests.support.fuzz_strategies.namespaces): the tokens' scope.
TEAM = "team-a"
# What only a peer node sends (a forwarded call's marker and seal, the forwarding node's own token): from a
# client, forged or garbled, it must be ignored or refused, never crash the call.
PEER_METADATA = (
    (FORWARDED_HEADER, "1"),
    (FORWARDED_HEADER, "v1."),
    (FORWARDED_HEADER, "v1." + "0" * 64),
    (FORWARDED_HEADER, "v2.x" * 1000),
    (NODE_TOKEN_HEADER, NODE),
    (NODE_TOKEN_HEADER, "not-a-node"),
    (NODE_TOKEN_HEADER, ""),
)
SERVER_FAULTS = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
UNARY_DEADLINE_S = 30  # generous: a shared 2-core machine; DEADLINE_EXCEEDED is an acceptable answer
STREAM_DEADLINE_S = 1.5  # a watch that is accepted stays open: it ends at its deadline


def _identity(b: bytes) -> bytes:
    return b


def call(
    channel: grpc.Channel, method, payload: bytes, secret: str | None, extra: tuple[tuple[str, str], ...] = ()
) -> tuple[grpc.StatusCode, str]:
    """Send ``payload`` as the request of ``method``: the status the node answered and its details."""
    path = f"/{SERVICE.full_name}/{method.name}"
    metadata = ((("authorization", f"Bearer {secret}"),) if secret is not None else ()) + extra
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=_identity, response_deserializer=_identity)(
                payload, metadata=metadata, timeout=STREAM_DEADLINE_S
            )
            for _ in stream:
                pass
        else:
            channel.unary_unary(path, request_serializer=_identity, response_deserializer=_identity)(
                payload, metadata=metadata, timeout=UNARY_DEADLINE_S
            )
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def _admitted(d: dict) -> Job | None:
    try:
        return job_from_dict(d, require_executor=True)
    except InvalidJob:
        return None
    except Exception:  # noqa: BLE001 - a crash of the spec itself is test_fuzz_spec's finding, not the node's
        return None


# Jobs the spec accepts, at its edges (a slot in year 9999, a cron that fires once in years, ten-year
# durations): the node must store, schedule, list and answer them and keep scheduling the rest.
accepted_jobs = job_dicts().map(_admitted).filter(lambda job: job is not None)
PUT_JOB = SERVICE.methods_by_name["PutJob"]


@st.composite
def requests(draw):
    """(an RPC, the bytes of its request)."""
    method = draw(st.sampled_from(WEIGHTED_METHODS))
    way = draw(st.integers(0, 3))
    if way == 3:
        return method, draw(raw_payloads())
    if way == 2:
        job = draw(accepted_jobs)
        return PUT_JOB, pb.PutJobRequest(job=job_to_proto(job, redact=False)).SerializeToString()
    return method, draw(messages(method.input_type)).SerializeToString()


@pytest.fixture
def node(make_cluster, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"fuzz-admin {hash_secret(ADMIN)} admin *\nfuzz-node {hash_secret(NODE)} admin *\n")
    c = make_cluster(
        f"sqlite:///{tmp_path}/store.db",
        shards=4,
        extra_args=["--auth-token-file", str(tokens), "--allow-python", "tests.support.pyjobs"],
    )
    n = c.add("n0", env={"SHARDCRON_NODE_TOKEN": NODE, "PYTHONPATH": os.getcwd()})
    c.wait_balanced({"n0"}, 120)
    return c, n


def ticks_after(admin, job_id: str, namespace: str, since_ms: int) -> int:
    return sum(1 for t in admin.list_ticks(job_id, limit=20, namespace=namespace) if t.scheduled_at_ms > since_ms)


def test_every_rpc_answers_random_and_malformed_requests_without_a_server_fault(node):
    cluster, n = node
    alive_ns, alive = (
        f"alive-{uuid.uuid4().hex[:8]}",
        job_from_dict({"id": "alive", "every": "1s", "executor": {"kind": "noop"}}),
    )
    with token_client(n, ADMIN) as admin:
        ensure_namespaces(admin, TEAM, alive_ns)
        admin.put_job(alive, namespace=alive_ns)
        tag = uuid.uuid4().hex[:8]
        secrets = {role: admin.create_token(f"fuzz-{role}-{tag}", role, [TEAM])[1] for role in ("write", "read")}
        secrets["stored-admin"] = admin.create_token(f"fuzz-admin-{tag}", "admin", ["*"])[1]
        admin.put_job(job_from_dict({"id": "job-1", "every": "1h", "executor": {"kind": "noop"}}), namespace=TEAM)
        start_ms = int(time.time() * 1000)
        wait_until(
            lambda: ticks_after(admin, "alive", alive_ns, start_ms) >= 1, 60, 0.2, what="the liveness job's first tick"
        )
    # Mostly tokens that pass, so that the calls reach the handlers; then every way of failing the check.
    callers = st.sampled_from(
        (
            ADMIN,
            ADMIN,
            secrets["stored-admin"],
            secrets["write"],
            secrets["write"],
            secrets["read"],
            None,
            "",
            "not-a-token",
            " " + ADMIN,
            "Bearer " + ADMIN,
            "bearer",
            ADMIN[:-1],
            "x" * 4096,
        )
    )
    channel = grpc.insecure_channel(n.address)
    answered: Counter = Counter()

    @fuzz_settings(600)
    @given(request=requests(), secret=callers, extra=st.lists(st.sampled_from(PEER_METADATA), max_size=2, unique=True))
    def fuzz(request, secret, extra):
        method, payload = request
        code, details = call(channel, method, payload, secret, tuple(extra))
        event(f"{method.name}: {code.name}")
        answered[method.name, code.name] += 1
        assert code not in SERVER_FAULTS, f"{method.name} answered {code.name}: {details[:500]}"

    try:
        fuzz()
    finally:
        channel.close()
    # The fuzzing reached the handlers, not only the token check: some calls were served, some refused there.
    codes = {code for _, code in answered}
    assert {"OK", "INVALID_ARGUMENT"} <= codes, f"answers: {sorted(answered.items())}"
    assert n.alive(), f"the node died; its log ends:\n{n.log_text()[-3000:]}"
    assert_no_traceback(cluster)

    # Still scheduling: whatever the fuzzer did to the job, put it back as it was, then see new ticks.
    with token_client(n, ADMIN) as admin:
        # Every job the fuzzer left is answered, and read back by the client, as `jobs list -A` does.
        for _ in admin.list_jobs_runs(namespace=ALL_NAMESPACES):
            pass
        ensure_namespaces(admin, alive_ns)
        admin.put_job(alive, namespace=alive_ns)
        admin.resume_job("alive", namespace=alive_ns)
        since_ms = int(time.time() * 1000)
        wait_until(
            lambda: ticks_after(admin, "alive", alive_ns, since_ms) >= 2,
            60,
            0.2,
            what="the liveness job's ticks after the fuzzing",
        )
    assert_no_traceback(cluster)
