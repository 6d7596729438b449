"""The pure parts that wire namespaces in: the CLI's flags and how it prints rates, the API's
conversions of settings and quotas, and which namespaces a reload found changed."""

from __future__ import annotations

import argparse
from fractions import Fraction

import pytest

from shardcron.cli.namespaces import NamespaceFlagError, fmt_rate, parse_count, parse_rate, parse_weight, quota_flags
from shardcron.coordination.namespace_watch import changed_namespaces
from shardcron.errors import InvalidJob
from shardcron.rules.namespace_settings import NamespaceSettings, StoredNamespace
from shardcron.rules.quotas import Quota, Usage
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import BadRequest
from shardcron.wire.namespace_convert import (
    namespace_request,
    namespace_to_proto,
    quota_values,
    settings_from_proto,
    stored_namespace_from_proto,
)


@pytest.mark.parametrize("text, value", [("0", 0), ("12", 12), ("none", None), ("NONE", None)])
def test_parse_count(text, value):
    assert parse_count(text, "--max-jobs") == value


@pytest.mark.parametrize("text", ["-1", "1.5", "lots", ""])
def test_parse_count_refuses(text):
    with pytest.raises(NamespaceFlagError, match=r"^--max-jobs: must be a whole number of at least 0 or 'none'"):
        parse_count(text, "--max-jobs")


@pytest.mark.parametrize(
    "text, value",
    [("2.5", Fraction(5, 2)), ("10/3", Fraction(10, 3)), ("0", 0), ("0.1", Fraction(1, 10)), ("none", None)],
)
def test_parse_rate_is_exact(text, value):
    assert parse_rate(text, "--max-slots-per-second") == value


@pytest.mark.parametrize("text", ["-0.5", "1/0", "fast", "nan"])
def test_parse_rate_refuses(text):
    with pytest.raises(NamespaceFlagError, match=r"^--max-slots-per-second: must be a number of at least 0"):
        parse_rate(text, "--max-slots-per-second")


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "heavy"])
def test_parse_weight_refuses(text):
    with pytest.raises(NamespaceFlagError, match=r"^--weight: must be a number above 0"):
        parse_weight(text)


def test_quota_flags_name_only_what_is_given():
    a = argparse.Namespace(max_jobs="none", max_slots_per_second="10/3", max_running=None)
    assert quota_flags(a) == {"max_jobs": None, "max_slots_per_second": Fraction(10, 3)}


@pytest.mark.parametrize(
    "rate, shown",
    [(None, "-"), (Fraction(3), "3"), (Fraction(1, 2), "0.5"), (Fraction(10, 3), "3.333 (10/3)"), (Fraction(0), "0")],
)
def test_fmt_rate(rate, shown):
    assert fmt_rate(rate) == shown


def test_settings_from_a_request():
    p = namespace_request("team-a", quota={"max_jobs": 5, "max_slots_per_second": Fraction(10, 3), "max_running": None})
    assert settings_from_proto(p) == NamespaceSettings(1.0, Quota(5, Fraction(10, 3), None))  # weight 0: 1
    p.weight = 2.5
    assert settings_from_proto(p).weight == 2.5
    p.weight = -1
    with pytest.raises(BadRequest, match="namespace.weight: must be a number above 0"):
        settings_from_proto(p)


@pytest.mark.parametrize(
    "quota, field",
    [
        (pb.NamespaceQuota(max_jobs=-1), "max_jobs"),
        (pb.NamespaceQuota(max_slots_per_second="x"), "max_slots_per_second"),
        (pb.NamespaceQuota(max_running=-2), "max_running"),
    ],
)
def test_a_bad_quota_names_its_field(quota, field):
    with pytest.raises(InvalidJob, match=f"^namespace.quota.{field}: must be"):
        settings_from_proto(pb.Namespace(name="team-a", quota=quota))


def test_quota_values_of_an_update():
    q = pb.NamespaceQuota(max_jobs=3)
    assert quota_values(q, ["max_jobs", "max_running"]) == {"max_jobs": 3, "max_running": None}
    with pytest.raises(BadRequest, match="quota_fields: 'max_cpu' is not a quota"):
        quota_values(q, ["max_cpu"])


def test_a_namespace_survives_the_round_trip():
    n = StoredNamespace(
        "team-a", NamespaceSettings(2.0, Quota(None, Fraction(10, 3), 4)), Usage(7, Fraction(7, 6)), 1000, 2000
    )
    assert stored_namespace_from_proto(namespace_to_proto(n)) == n


def test_changed_namespaces():
    a, b = NamespaceSettings(1.0), NamespaceSettings(2.0)
    assert changed_namespaces({"x": a, "y": a, "z": a}, {"x": a, "y": b, "w": a}) == ["w", "y", "z"]
    assert changed_namespaces({}, {}) == []
