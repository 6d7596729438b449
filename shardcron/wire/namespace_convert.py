"""Namespaces between protobuf and ``StoredNamespace`` / ``NamespaceSettings``, for the server and the client."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from shardcron.errors import InvalidJob
from shardcron.rules.fair_queue import DEFAULT_WEIGHT
from shardcron.rules.namespace_settings import NamespaceSettings, StoredNamespace, check_weight
from shardcron.rules.quotas import QUOTA_KEYS, Quota, Usage, parse_quota
from shardcron.spec.namespaces import validate_namespace
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import BadRequest


def namespace_name(name: str, field: str = "name") -> str:
    """A namespace name from a request: INVALID_ARGUMENT naming the field when it breaks the rule."""
    return validate_namespace(name, field)


def quota_from_proto(p: pb.NamespaceQuota, field: str = "namespace.quota") -> Quota:
    raw: dict = {}
    for key in QUOTA_KEYS:
        if p.HasField(key):
            raw[key] = getattr(p, key)
    return parse_quota(raw, field)


def quota_values(p: pb.NamespaceQuota, names, field: str = "namespace.quota") -> dict[str, int | Fraction | None]:
    """UpdateNamespace: the named quotas' new values, None (no limit) for a named one left unset."""
    unknown = sorted(set(names) - set(QUOTA_KEYS))
    if unknown:
        raise BadRequest("quota_fields", f"{unknown[0]!r} is not a quota; the quotas are {', '.join(QUOTA_KEYS)}")
    quota = quota_from_proto(p, field)
    return {name: getattr(quota, name) for name in names}


def settings_from_proto(p: pb.Namespace) -> NamespaceSettings:
    """CreateNamespace: weight 0 (unset) is the default weight."""
    weight = p.weight or DEFAULT_WEIGHT
    try:
        check_weight(weight, "namespace.weight")
    except InvalidJob as e:
        raise BadRequest(e.field, e.reason) from None
    return NamespaceSettings(weight, quota_from_proto(p.quota))


def quota_to_proto(q: Quota) -> pb.NamespaceQuota:
    p = pb.NamespaceQuota()
    if q.max_jobs is not None:
        p.max_jobs = q.max_jobs
    if q.max_slots_per_second is not None:
        p.max_slots_per_second = str(q.max_slots_per_second)
    if q.max_running is not None:
        p.max_running = q.max_running
    return p


def namespace_to_proto(n: StoredNamespace) -> pb.Namespace:
    return pb.Namespace(
        name=n.name,
        weight=n.settings.weight,
        quota=quota_to_proto(n.settings.quota),
        jobs=n.usage.jobs,
        slots_per_second=str(n.usage.slots_per_second),
        created_at_ms=n.created_at_ms,
        updated_at_ms=n.updated_at_ms,
    )


def stored_namespace_from_proto(p: pb.Namespace) -> StoredNamespace:
    """A namespace as the server answered it."""
    return StoredNamespace(
        p.name,
        NamespaceSettings(p.weight or DEFAULT_WEIGHT, quota_from_proto(p.quota)),
        Usage(p.jobs, Fraction(p.slots_per_second or "0")),
        p.created_at_ms,
        p.updated_at_ms,
    )


def namespace_request(
    name: str, *, weight: float | None = None, quota: Mapping[str, int | Fraction | None] | None = None
) -> pb.Namespace:
    """The Namespace message of a Create/UpdateNamespace request (the client's side)."""
    p = pb.Namespace(name=name, weight=weight or 0)
    for key, value in (quota or {}).items():
        if value is not None:
            setattr(p.quota, key, str(value) if key == "max_slots_per_second" else value)
    return p


__all__ = [
    "namespace_name",
    "namespace_request",
    "namespace_to_proto",
    "quota_from_proto",
    "quota_to_proto",
    "quota_values",
    "settings_from_proto",
    "stored_namespace_from_proto",
]
