"""Namespaces: the name rule, the namespaced identity, and the pinned bytes and shards of namespaced keys.

The ``namespaced_vectors`` of tests/vectors/shards.json were written by ``shard_vectors`` (a second time before namespaces
shipped, when the separator became U+001F: PostgreSQL's text refuses the NUL of the first) and is
never regenerated again: if a test here fails, the rule changed, and jobs would move.
``default`` must hash exactly as shards.json says, or upgrading would move every job.
"""

import json
from pathlib import Path

import mmh3
import pytest

from shardcron.errors import InvalidJob
from shardcron.sharding import shard_for
from shardcron.spec.namespaces import (
    DEFAULT_NAMESPACE,
    InvalidNamespace,
    JobKey,
    delete_refusal,
    display_key,
    job_key,
    namespace_from_cli,
    namespace_of,
    namespace_or_default,
    shard_key_bytes,
    shard_of,
    shard_vectors,
    split_key,
    store_key,
    validate_namespace,
)
from tests.unit.test_sharding import VECTORS as DEFAULT_VECTORS
from tests.unit.test_sharding import murmur3_x86_32

VECTORS_FILE = Path(__file__).resolve().parents[2] / "vectors" / "shards.json"
DOC = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
VECTORS = DOC["namespaced_vectors"]


@pytest.mark.parametrize("name", ["default", "a", "0", "team-a", "x-1", "a" * 63, "billing2026"])
def test_valid_names(name):
    assert validate_namespace(name) == name


@pytest.mark.parametrize(
    "name, says",
    [
        ("", "must not be empty"),
        ("a" * 64, "is 64 characters long; the limit is 63"),
        ("Team", "lowercase letters, digits and '-'"),
        ("team_a", "lowercase"),
        ("-a", "starting and ending with a letter or digit"),
        ("a-", "starting and ending"),
        ("a/b", "lowercase"),
        ("*", "lowercase"),
        ("a\x00b", "lowercase"),
        ("é", "lowercase"),
        ("a b", "lowercase"),
        (7, "must be a string, got int"),
        (None, "must be a string, got NoneType"),
    ],
)
def test_invalid_names_say_why(name, says):
    with pytest.raises(InvalidNamespace) as e:
        validate_namespace(name, "job.namespace")
    assert e.value.field == "job.namespace" and says in e.value.reason
    assert isinstance(e.value, InvalidJob)  # the API's road to INVALID_ARGUMENT naming the field


@pytest.mark.parametrize("raw, expected", [(None, "default"), ("", "default"), ("team-a", "team-a")])
def test_no_namespace_is_default(raw, expected):
    assert namespace_or_default(raw) == expected


@pytest.mark.parametrize(
    "flag, env, expected",
    [
        (None, {}, "default"),
        (None, {"SHARDCRON_NAMESPACE": ""}, "default"),
        (None, {"SHARDCRON_NAMESPACE": "team-b"}, "team-b"),
        ("team-a", {"SHARDCRON_NAMESPACE": "team-b"}, "team-a"),
    ],
)
def test_cli_namespace_flag_then_environment_then_default(flag, env, expected):
    assert namespace_from_cli(flag, env) == expected


@pytest.mark.parametrize(
    "flag, env, field", [("Bad", {}, "--namespace"), (None, {"SHARDCRON_NAMESPACE": "B"}, "SHARDCRON_NAMESPACE")]
)
def test_cli_namespace_errors_name_where_it_came_from(flag, env, field):
    with pytest.raises(InvalidNamespace) as e:
        namespace_from_cli(flag, env)
    assert e.value.field == field


def test_job_key_validates_both_parts():
    assert job_key(None, "a") == JobKey("default", "a")
    with pytest.raises(InvalidJob):
        job_key("team-a", "bad\x00id")
    with pytest.raises(InvalidNamespace):
        job_key("Team", "a")


@pytest.mark.parametrize(
    "key, expected",
    [
        (JobKey("default", "a"), b"a"),
        (JobKey("default", "é"), b"\xc3\xa9"),
        (JobKey("team-a", "a"), b"team-a\x1fa"),
        (JobKey("a", "b/c"), b"a\x1fb/c"),
        (JobKey("defaults", "a"), b"defaults\x1fa"),
    ],
)
def test_key_bytes_are_the_documented_ones(key, expected):
    assert shard_key_bytes(key) == expected


@pytest.mark.parametrize("v", DEFAULT_VECTORS, ids=lambda v: f"{v['id'][:24]!r}-{v['shard_count']}")
def test_default_namespace_hashes_exactly_as_shards_json(v):
    assert shard_of(JobKey(DEFAULT_NAMESPACE, v["id"]), v["shard_count"]) == v["shard"]
    assert shard_key_bytes(JobKey(DEFAULT_NAMESPACE, v["id"])) == v["id"].encode("utf-8")


def test_keys_of_different_jobs_never_meet():
    # ("a", "b") vs ("ab", ...) vs ("default", "a...") : the U+001F, which neither part may hold, keeps them apart.
    keys = [JobKey(ns, i) for ns in ("default", "a", "ab", "a-b") for i in ("a", "b", "ab", "b-c", "a\x01")]
    assert len({shard_key_bytes(k) for k in keys}) == len(keys)


def test_vectors_file_covers_the_required_cases():
    keys = {(v["namespace"], v["id"]) for v in VECTORS}
    assert len(VECTORS) == 3 * len(keys) and {v["shard_count"] for v in VECTORS} == {16, 64, 256}
    namespaces = {ns for ns, _ in keys}
    assert "default" in namespaces and len(namespaces - {"default"}) >= 8
    assert any(len(ns) == 63 for ns in namespaces) and max(len(i.encode()) for _, i in keys) == 256
    assert any(not i.isascii() for _, i in keys) and any("/" in i for _, i in keys)
    assert ("team-a", "a") in keys and ("team-b", "a") in keys  # one id, two namespaces


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"{v['namespace'][:12]}/{v['id'][:12]}-{v['shard_count']}")
def test_namespaced_vector(v):
    key = JobKey(v["namespace"], v["id"])
    data = bytes.fromhex(v["key_hex"])
    assert shard_key_bytes(key) == data
    assert mmh3.hash(data, 0, signed=False) == murmur3_x86_32(data) == v["hash"]  # without mmh3 too
    assert v["hash"] % v["shard_count"] == v["shard"] == shard_of(key, v["shard_count"])


def test_vector_helper_reproduces_the_file():
    keys = list(dict.fromkeys(JobKey(v["namespace"], v["id"]) for v in VECTORS))
    assert shard_vectors(keys, [16, 64, 256]) == VECTORS


def test_same_id_in_two_namespaces_may_land_on_different_shards():
    assert shard_of(JobKey("team-a", "a"), 256) != shard_of(JobKey("team-b", "a"), 256)
    assert shard_of(JobKey("team-a", "a"), 256) == shard_for("team-a\x1fa", 256)


@pytest.mark.parametrize(
    "namespace, jobs, force, refusal",
    [
        ("team-a", 0, False, None),
        ("team-a", 12, True, None),
        ("team-a", 12, False, "namespace 'team-a' still holds 12 jobs: delete them first, or force the deletion"),
        ("team-a", 1, False, "namespace 'team-a' still holds 1 job: delete them first"),
        ("default", 0, True, "the namespace 'default' cannot be deleted"),
    ],
)
def test_deleting_a_namespace_that_holds_jobs_needs_force(namespace, jobs, force, refusal):
    reason = delete_refusal(namespace, jobs, force=force)
    assert reason is None if refusal is None else refusal in reason


@pytest.mark.parametrize(
    "namespace, job_id, key, shown",
    [
        (None, "a", "a", "a"),
        ("", "a/b", "a/b", "a/b"),
        ("default", "x", "x", "x"),
        ("team-a", "a", "team-a\x1fa", "team-a/a"),
        ("team-a", "a/b", "team-a\x1fa/b", "team-a/a/b"),
    ],
)
def test_store_key_round_trips(namespace, job_id, key, shown):
    assert store_key(namespace, job_id) == key
    assert split_key(key) == JobKey(namespace or "default", job_id)
    assert namespace_of(key) == (namespace or "default")
    assert display_key(key) == shown


def test_an_id_in_a_namespace_leaves_room_for_it_in_the_key():
    assert job_key("team-a", "x" * 249).id == "x" * 249  # 256 - len("team-a") - 1
    with pytest.raises(InvalidJob, match=r"250 bytes long; in namespace 'team-a' the limit is 249"):
        job_key("team-a", "x" * 250)
    assert job_key("default", "x" * 256).id == "x" * 256  # default keeps the whole 256 bytes
