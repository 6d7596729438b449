"""A job's key: ``(namespace, id)`` as the one string a node and its store hold, and back.

No validation and no imports from the rest of shardcron, so the model, the
executors and the consumers' ``dedupe`` module can all use it (the rules live in
``namespaces``). The key is the id itself in ``default`` (so nothing stored before
namespaces changes) and ``namespace U+001F id`` elsewhere: ids and namespace names
both refuse control characters, so the split is unambiguous.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

DEFAULT_NAMESPACE = "default"
KEY_SEPARATOR = "\x1f"  # the ASCII unit separator

# uuid5 namespace of shardcron slot ids (executors.identity.SLOT_NAMESPACE). Fixed forever.
SLOT_NAMESPACE = uuid.UUID("6d2a0c55-3f8e-5b7e-9a47-6b1f2f0f9c11")


class JobKey(NamedTuple):
    """A job's identity: ids are unique within a namespace, not across namespaces."""

    namespace: str
    id: str

    def __str__(self) -> str:  # for log lines and messages; never parsed back (ids may hold '/')
        return f"{self.namespace}/{self.id}"


def join_key(namespace: str, job_id: str) -> str:
    return job_id if namespace == DEFAULT_NAMESPACE else namespace + KEY_SEPARATOR + job_id


def split_key(key: str) -> JobKey:
    """A stored key back to ``(namespace, id)``; a key without the separator is a ``default`` job."""
    namespace, sep, job_id = key.partition(KEY_SEPARATOR)
    return JobKey(namespace, job_id) if sep else JobKey(DEFAULT_NAMESPACE, key)


def namespace_of(key: str) -> str:
    """The namespace of a stored key, without building the pair."""
    cut = key.find(KEY_SEPARATOR)
    return DEFAULT_NAMESPACE if cut < 0 else key[:cut]


def display_key(key: str) -> str:
    """A key for people: the id in ``default``, ``namespace/id`` elsewhere (log lines, messages)."""
    return key if KEY_SEPARATOR not in key else key.replace(KEY_SEPARATOR, "/", 1)


def slot_idempotency_key(key: str, scheduled_at_ms: int) -> str:
    """The slot's idempotency key, as executors send it downstream (``Idempotency-Key``, message ids).

    ``default``: ``"<id>:<scheduled_at_ms>"``, as before namespaces (a consumer's dedupe
    store keeps recognising every slot across the upgrade). Another namespace:
    ``"<namespace>/"`` and a UUID of the key and slot: printable and header-safe (the
    key's U+001F is neither), and never equal to a ``default`` key, which always
    holds a ``:`` that neither a namespace name nor a UUID does.
    """
    if KEY_SEPARATOR not in key:
        return f"{key}:{scheduled_at_ms}"
    namespace = key[: key.find(KEY_SEPARATOR)]
    return f"{namespace}/{uuid.uuid5(SLOT_NAMESPACE, f'{key}:{scheduled_at_ms}')}"


__all__ = [
    "DEFAULT_NAMESPACE",
    "KEY_SEPARATOR",
    "SLOT_NAMESPACE",
    "JobKey",
    "display_key",
    "join_key",
    "namespace_of",
    "slot_idempotency_key",
    "split_key",
]
