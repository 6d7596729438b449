"""Namespaces: the name rule, a job's namespaced identity, and the exact bytes its shard hashes.

A namespace name is 1 to 63 characters of ``a-z``, ``0-9`` and ``-``, starting and
ending with a letter or digit (an RFC 1123 label, as Kubernetes namespaces are).
That charset is safe unescaped in an etcd key, a SQL column, a Prometheus label,
a log line and a file name, and it holds neither ``/`` nor a control character nor ``*`` (the
wildcard of token scopes, ``scopes.ALL_NAMESPACES``). No name or an empty one is
``default``: existing job files and clients keep working unchanged.

A job's identity is ``JobKey(namespace, id)``. Its shard stays the murmur3 rule of
``shardcron.sharding`` applied to these bytes (``shard_key_bytes``)::

    namespace == "default":  utf8(id)                             (exactly as before namespaces)
    otherwise:               utf8(namespace) + b"\\x1f" + utf8(id)

so ``shard = murmur3_x86_32(shard_key_bytes, seed=0) as unsigned % shard_count``.
``default`` hashing as before keeps every existing shard map and
``tests/vectors/shards.json`` true: upgrading moves no job. The encoding is
injective: a job id refuses control characters (``fields.validate_job_id``) and
a namespace holds none either, so a key with a U+001F (the ASCII unit separator)
splits at it into (namespace, id), and a key without one is a ``default`` job.

The same text is the job's key inside a node and in the store (the ``id`` column
of ``jobs``, the ``job_id`` of ``ticks``): every place that hashed a job id keeps
hashing what it holds, and ``default`` rows are unchanged by the upgrade. Not NUL:
PostgreSQL's text refuses it. The key is at most 256 bytes of UTF-8
(``MAX_JOB_ID_BYTES``), so an id in a namespace may be 256 - len(namespace) - 1
bytes long; ``job_key`` says so when one is longer.
``namespaced_vectors`` in ``tests/vectors/shards.json`` hold namespaced keys with their bytes,
hash and shard for clients in other languages; ``shard_vectors`` writes its entries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from shardcron.errors import InvalidJob
from shardcron.jobkey import DEFAULT_NAMESPACE, JobKey, display_key, join_key, namespace_of, split_key
from shardcron.sharding import shard_for
from shardcron.spec.fields import MAX_JOB_ID_BYTES, validate_job_id

MAX_NAMESPACE_LENGTH = 63
NAMESPACE_ENV = "SHARDCRON_NAMESPACE"  # the CLI's --namespace/-n when the flag is not given

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


class InvalidNamespace(InvalidJob):
    """A namespace name breaks the rule. An ``InvalidJob`` too, so the API answers
    INVALID_ARGUMENT naming the field, as for any other malformed field."""


def validate_namespace(name: object, field: str = "namespace") -> str:
    """``name`` if it follows the rule (see the module docstring), else ``InvalidNamespace`` saying why."""
    if not isinstance(name, str):
        raise InvalidNamespace(field, f"must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidNamespace(field, "must not be empty")
    if len(name) > MAX_NAMESPACE_LENGTH:
        raise InvalidNamespace(field, f"is {len(name)} characters long; the limit is {MAX_NAMESPACE_LENGTH}")
    if not _NAME.fullmatch(name):
        raise InvalidNamespace(
            field,
            f"{name!r} must be lowercase letters, digits and '-', starting and ending "
            "with a letter or digit (e.g. 'team-a')",
        )
    return name


def namespace_or_default(name: str | None, field: str = "namespace") -> str:
    """The namespace a request or a job file names; ``default`` when it names none (None or empty)."""
    return DEFAULT_NAMESPACE if name is None or name == "" else validate_namespace(name, field)


def namespace_from_cli(flag: str | None, environ: Mapping[str, str]) -> str:
    """``--namespace``/``-n`` wins, then ``SHARDCRON_NAMESPACE``, then ``default``."""
    if flag:
        return validate_namespace(flag, "--namespace")
    return namespace_or_default(environ.get(NAMESPACE_ENV), NAMESPACE_ENV)


def job_key(namespace: str | None, job_id: str, field: str = "id") -> JobKey:
    """The validated identity of the job ``job_id`` in ``namespace`` (None or empty: ``default``).

    Not the printable rule: ``job_from_dict`` applies it where a job is defined, and a lookup (get, pause,
    delete) must still find a job stored before that rule, whatever its id holds."""
    key = JobKey(namespace_or_default(namespace), validate_job_id(job_id, field, printable=False))
    if key.namespace != DEFAULT_NAMESPACE:
        room = MAX_JOB_ID_BYTES - len(key.namespace) - 1
        size = len(key.id.encode("utf-8"))
        if size > room:
            raise InvalidJob(
                field,
                f"is {size} bytes long; in namespace {key.namespace!r} the limit is {room} "
                f"({MAX_JOB_ID_BYTES} bytes less the namespace and one separator)",
            )
    return key


def store_key(namespace: str | None, job_id: str, field: str = "id") -> str:
    """The validated key of a job inside a node and in the store (see the module docstring)."""
    return shard_key(job_key(namespace, job_id, field))


def shard_key(key: JobKey) -> str:
    """The text whose UTF-8 bytes the shard rule hashes: the id alone in ``default``, else namespace U+001F id."""
    return join_key(key.namespace, key.id)


def shard_key_bytes(key: JobKey) -> bytes:
    """The exact bytes that go into murmur3 for ``key`` (see the module docstring)."""
    return shard_key(key).encode("utf-8")


def shard_of(key: JobKey, shard_count: int) -> int:
    """The shard of a namespaced job: ``shard_for`` of its shard key, so the rule itself is not repeated."""
    return shard_for(shard_key(key), shard_count)


def delete_refusal(namespace: str, job_count: int, *, force: bool) -> str | None:
    """Why deleting ``namespace`` is refused (FAILED_PRECONDITION), or None when it may go.

    ``default`` always exists: every request that names no namespace lands there.
    A namespace that still holds jobs goes only with ``force`` (its jobs with it),
    so a typo cannot delete a team's jobs."""
    if namespace == DEFAULT_NAMESPACE:
        return "the namespace 'default' cannot be deleted: requests and job files that name no namespace use it"
    if job_count and not force:
        return (
            f"namespace {namespace!r} still holds {job_count} job{'s' if job_count != 1 else ''}: delete them "
            "first, or force the deletion to delete them with it"
        )
    return None


def shard_vectors(keys: Iterable[JobKey], shard_counts: Iterable[int]) -> list[dict[str, object]]:
    """Entries of ``namespaced_vectors`` in ``tests/vectors/shards.json``: each key with its bytes, raw hash and shards.

    The raw hash is the shard for a count of 2**32 (the rule's modulo leaves it whole)."""
    counts = list(shard_counts)
    return [
        {
            "namespace": key.namespace,
            "id": key.id,
            "key_hex": shard_key_bytes(key).hex(),
            "hash": shard_of(key, 2**32),
            "shard_count": n,
            "shard": shard_of(key, n),
        }
        for key in keys
        for n in counts
    ]


__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_NAMESPACE_LENGTH",
    "NAMESPACE_ENV",
    "InvalidNamespace",
    "JobKey",
    "delete_refusal",
    "display_key",
    "job_key",
    "namespace_of",
    "split_key",
    "store_key",
    "namespace_from_cli",
    "namespace_or_default",
    "shard_key",
    "shard_key_bytes",
    "shard_of",
    "shard_vectors",
    "validate_namespace",
]
