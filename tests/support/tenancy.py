"""What the tenancy tests share: clients with a token, waiting for a token to be known, refusals, and
watching ticks from a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from shardcron.client.channel import ChannelSecurity
from shardcron.client.client import Client
from shardcron.client.errors import ApiError, InvalidRequest
from shardcron.spec.job import job_from_dict


def token_client(node, secret: str | None, namespace: str | None = None) -> Client:
    """A client of one node: each call is served there, forwarded when the node does not lead the shard."""
    return Client([node.address], security=ChannelSecurity(token=secret), namespace=namespace)


def hourly_job(job_id: str, **kw):
    return job_from_dict({"id": job_id, "every": "1h", "executor": {"kind": "noop"}, **kw})


def ensure_namespaces(admin: Client, *names: str) -> None:
    """Create ``names``, each unless an earlier test of the module did."""
    for name in names:
        try:
            admin.create_namespace(name)
        except ApiError as e:
            assert e.code is grpc.StatusCode.ALREADY_EXISTS, e


def accepted(node, secret: str) -> bool:
    """Whether ``node`` knows a token created through another one yet (nodes reload theirs every few seconds)."""
    with token_client(node, secret) as c:
        try:
            c.shards()
            return True
        except ApiError as e:
            if e.code is grpc.StatusCode.UNAUTHENTICATED:
                return False
            raise


def denied(call) -> ApiError:
    with pytest.raises(ApiError) as e:
        call()
    assert e.value.code is grpc.StatusCode.PERMISSION_DENIED, e.value
    return e.value


def watching(watch) -> tuple[list, threading.Thread]:
    """The ticks ``watch`` yields, collected by a thread as they come (cancel the watch to end it)."""
    seen: list = []

    def consume():
        for t in watch:
            seen.append(t)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    return seen, reader


@contextmanager
def watched(*watches) -> Iterator[list[list]]:
    """The ticks each watch yields, collected as they come; the watches cancelled and read out on leaving."""
    readers = [watching(w) for w in watches]
    try:
        yield [seen for seen, _ in readers]
    finally:
        for w in watches:
            w.cancel()
        for _, reader in readers:
            reader.join(10)


def succeeded(seen: list, key: str, at: int | None = None) -> bool:
    """``seen`` holds a succeeded tick of the job ``key`` (of the slot ``at``, when one is named)."""
    return any(t.job_id == key and t.status.value == "succeeded" and at in (None, t.scheduled_at_ms) for t in seen)


def admitted(client: Client, job) -> bool:
    """Put ``job``; False while the node that admits it does not know one of its calendars yet (each node's
    copy follows the store through a watch, so a calendar put a moment ago may need a moment there)."""
    try:
        client.put_job(job)
    except InvalidRequest as e:
        assert "unknown calendar" in str(e), e
        return False
    return True
