"""The reference pages (docs/reference/) are generated from the code: every flag, job-file key, executor
key, RPC, metric and limit has an entry, and no entry names one that is gone.

Each page's generated part is compared with a fresh generation, byte for byte; a difference fails
naming the entries that differ and how to regenerate (`make docs-reference`).
"""

from __future__ import annotations

import json

import pytest

from shardcron.dev.docs_reference import executors, job_file, sharding
from shardcron.dev.docs_reference.markdown import BEGIN, END, MarkerMissing, generated_part, splice
from shardcron.dev.docs_reference.pages import PAGES, REFERENCE, drift, fresh
from shardcron.model import ExecutorKind


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_committed_page_is_what_the_code_generates(page):
    committed = (REFERENCE / page).read_text(encoding="utf-8")
    problem = drift(page, committed, fresh(page, committed))
    assert not problem, problem


def test_every_page_with_a_generated_part_has_a_generator():
    marked = sorted(p.name for p in REFERENCE.glob("*.md") if BEGIN in p.read_text(encoding="utf-8"))
    assert marked == sorted(PAGES)


def test_a_flag_missing_from_the_page_is_named_with_how_to_regenerate():
    generated = fresh("cli.md")
    row = next(line for line in generated.splitlines() if line.startswith("| `--executor-slots"))
    committed = generated.replace(row + "\n", "")
    problem = drift("cli.md", committed, generated)
    assert "not on the page, but in the code: shardcron node: `--executor-slots`" in problem, problem
    assert "make docs-reference" in problem


def test_an_entry_the_code_no_longer_has_is_named():
    generated = fresh("cli.md")
    row = next(line for line in generated.splitlines() if line.startswith("| `--executor-slots"))
    committed = generated.replace(row, row + "\n" + row.replace("--executor-slots", "--gone-flag"))
    problem = drift("cli.md", committed, generated)
    assert "on the page, but no longer in the code: shardcron node: `--gone-flag`" in problem, problem


def test_a_changed_default_is_shown_as_the_row_the_code_has_now():
    generated = fresh("cli.md")
    row = next(line for line in generated.splitlines() if line.startswith("| `--ttl"))
    committed = generated.replace(row, row.replace("`10`", "`11`"))
    problem = drift("cli.md", committed, generated)
    assert row in problem, problem


def test_a_job_file_key_without_an_entry_stops_the_generator(monkeypatch):
    keys = dict(job_file.KEYS)
    del keys["overlap"]
    monkeypatch.setattr(job_file, "KEYS", keys)
    with pytest.raises(job_file.DriftError, match="the spec takes 'overlap', which has no entry"):
        job_file.render()


def test_an_entry_for_a_key_the_spec_no_longer_takes_stops_the_generator(monkeypatch):
    monkeypatch.setattr(job_file, "KEYS", {**job_file.KEYS, "retired": job_file.Key("string", "gone", "x")})
    with pytest.raises(job_file.DriftError, match="KEYS describes 'retired', which the spec no longer takes"):
        job_file.render()


def test_an_example_the_spec_refuses_stops_the_generator(monkeypatch):
    monkeypatch.setattr(job_file, "KEYS", {**job_file.KEYS, "timeout": job_file.Key("duration", "x", "ten minutes")})
    with pytest.raises(job_file.DriftError, match="the example of 'timeout'"):
        job_file.render()


def test_a_page_without_its_markers_is_refused():
    with pytest.raises(MarkerMissing):
        splice("# A page\n", "| a |\n")
    assert splice(f"top\n{BEGIN}\nold\n{END}\nbottom\n", "new") == f"top\n{BEGIN}\n\nnew\n\n{END}\nbottom\n"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_any_entry_missing_from_a_page_is_named(page):
    generated = fresh(page)
    part = generated_part(generated)
    row = [line for line in part.splitlines() if line.startswith("| ")][-1]  # a data row: the last one
    name = row[2:].split(" | ", 1)[0]
    problem = drift(page, generated.replace(row + "\n", "", 1), generated)
    assert "not on the page, but in the code:" in problem and name in problem, problem


def test_a_vector_the_code_does_not_reproduce_stops_the_generator(monkeypatch, tmp_path):
    data = json.loads(sharding.VECTORS.read_text(encoding="utf-8"))
    data["vectors"][0]["shard"] += 1
    wrong = tmp_path / "shards.json"
    wrong.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(sharding, "VECTORS", wrong)
    with pytest.raises(sharding.DriftError, match="does not reproduce the vector"):
        sharding.render()


def test_an_rpc_missing_from_the_api_page_is_named():
    generated = fresh("api.md")
    row = next(line for line in generated.splitlines() if line.startswith("| `WatchTicks` |"))
    problem = drift("api.md", generated.replace(row + "\n", ""), generated)
    assert "not on the page, but in the code: Service `shardcron.v1.Scheduler`: `WatchTicks`" in problem, problem


def test_an_executor_key_without_an_entry_stops_the_generator(monkeypatch):
    keys = {k: v for k, v in executors.KEYS.items() if k != (ExecutorKind.NATS, "jetstream")}
    monkeypatch.setattr(executors, "KEYS", keys)
    with pytest.raises(executors.DriftError, match="nats.jetstream: the spec takes it, KEYS has no entry"):
        executors.render()


def test_an_executor_entry_for_a_key_that_is_gone_stops_the_generator(monkeypatch):
    gone = {(ExecutorKind.RQ, "timeout"): executors.Key("duration", "gone", "1m")}
    monkeypatch.setattr(executors, "KEYS", {**executors.KEYS, **gone})
    with pytest.raises(executors.DriftError, match="rq.timeout: KEYS describes it, the spec no longer takes it"):
        executors.render()
