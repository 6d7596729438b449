"""A namespaced job's tick as executors send it downstream, as consumers read it back, and in log lines."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from shardcron.consumer import TickInfo
from shardcron.executors.identity import slot_uuid, tick_fields, tick_headers, tick_values
from shardcron.jobkey import SLOT_NAMESPACE, join_key, slot_idempotency_key
from shardcron.logs import JsonFormatter, TextFormatter
from shardcron.model import TickContext


def ctx(key: str, at: int = 1_700_000_000_000) -> TickContext:
    return TickContext(key, at, 1, 7, 3, "n1")


def test_a_default_job_sends_exactly_what_it_sent_before_namespaces():
    c = ctx("nightly")
    assert c.idempotency_key == "nightly:1700000000000"
    assert slot_uuid(c) == str(uuid.uuid5(SLOT_NAMESPACE, "nightly:1700000000000"))
    assert "namespace" not in tick_values(c) and "X-Shardcron-Namespace" not in tick_headers(c)
    assert "shardcron_namespace" not in tick_fields(c)  # an arq/RQ task's keyword arguments are unchanged


def test_a_namespaced_job_sends_its_namespace_beside_its_id_and_no_control_character():
    c = ctx(join_key("team-a", "nightly"))
    values = tick_values(c)
    assert (values["job_id"], values["namespace"]) == ("nightly", "team-a")
    headers = tick_headers(c)
    assert headers["X-Shardcron-Job-Id"] == "nightly" and headers["X-Shardcron-Namespace"] == "team-a"
    assert all(0x20 <= ord(ch) < 0x7F for v in headers.values() for ch in v), headers  # header-safe
    assert headers["Idempotency-Key"].startswith("team-a/")


@pytest.mark.parametrize(
    "default_id, namespace, job_id",
    [
        ("team-a/nightly", "team-a", "nightly"),  # how ids were namespaced by hand before namespaces
        ("team-a:nightly", "team-a", "nightly"),
        ("team-a", "team-a", ""),
    ],
)
def test_a_namespaced_slot_never_shares_an_idempotency_key_with_a_default_one(default_id, namespace, job_id):
    at = 1_700_000_000_000
    job_id = job_id or "x"
    namespaced = slot_idempotency_key(join_key(namespace, job_id), at)
    assert namespaced != slot_idempotency_key(default_id, at)
    assert ":" not in namespaced  # a default key always holds one: the two forms cannot meet


def test_a_consumer_reads_the_namespace_back_and_keys_its_dedupe_by_both():
    c = ctx(join_key("team-a", "nightly"))
    info = TickInfo.from_mapping(tick_fields(c))
    assert (info.namespace, info.job_id) == ("team-a", "nightly")
    assert info.key == c.job_id and info.idempotency_key == c.idempotency_key
    other = TickInfo.from_mapping(tick_headers(ctx(join_key("team-b", "nightly"))))
    assert other.key != info.key and other.idempotency_key != info.idempotency_key
    plain = TickInfo.from_mapping(tick_headers(ctx("nightly")))
    assert (plain.namespace, plain.key) == (None, "nightly")


def _record(msg: str, *args, **extra) -> logging.LogRecord:
    record = logging.LogRecord("shardcron.test", logging.INFO, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(record, k, v)
    return record


def test_log_lines_split_a_key_into_namespace_and_job():
    key = join_key("team-a", "nightly")
    line = TextFormatter().format(_record("tick %s@%d", key, 5, job=key, shard=3))
    assert "tick team-a/nightly@5" in line and "namespace=team-a" in line and "job=nightly" in line
    assert "\x1f" not in line
    d = json.loads(JsonFormatter().format(_record("tick %s", key, job=key)))
    assert (d["namespace"], d["job"], d["msg"]) == ("team-a", "nightly", "tick team-a/nightly")
    plain = TextFormatter().format(_record("tick %s", "nightly", job="nightly"))
    assert "namespace=" not in plain and "job=nightly" in plain
