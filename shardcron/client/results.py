"""What the client's calls answer beyond ``model``'s dataclasses: a ``put_jobs`` result and a token."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from shardcron.model import Job
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import stored_job_from_proto


@dataclass(frozen=True)
class PutResult:
    """One job's outcome in ``put_jobs``."""

    id: str
    ok: bool
    code: str = "OK"  # the gRPC status name
    message: str = ""
    retryable: bool = False  # UNAVAILABLE: the shard had no leader in time; sending it again may succeed
    unchanged: bool = False  # ok, and the stored job was already this one: nothing was written
    stored: pb.Job | None = field(default=None, repr=False, compare=False)  # as the server answered

    @functools.cached_property
    def job(self) -> Job | None:
        """The stored job, when ok; decoded on first use, so a batch of thousands costs nothing for it."""
        return stored_job_from_proto(self.stored) if self.stored is not None else None


@dataclass(frozen=True)
class TokenInfo:
    """A token as the API describes it (never its secret, nor its hash)."""

    name: str
    role: str
    namespaces: tuple[str, ...]  # ("*",): every namespace
    source: str  # "file" or "store"
    created_at_ms: int
    created_by: str

    @classmethod
    def of(cls, p: pb.ApiToken) -> TokenInfo:
        return cls(p.name, p.role, tuple(p.namespaces), p.source, p.created_at_ms, p.created_by)


__all__ = ["PutResult", "TokenInfo"]
