"""The tick statement table's shape (store/tick_statements.py), without a database: its statements run in
tests/integration/store/test_tick_statements.py."""

from __future__ import annotations

import pytest

from shardcron.store.tick_statements import DIALECTS, WRITES, Form, Kind, fenced_rows

WRITE_PARAMS = pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))


@WRITE_PARAMS
def test_every_write_has_one_statement_for_every_dialect(write):
    assert set(write.statements) == set(DIALECTS)
    assert write.row and list(write.row)[:2] == ["b_job", "b_at"], "job id and slot come first in every row"


@WRITE_PARAMS
def test_every_write_of_existing_rows_carries_the_one_fence_condition(write):
    if write.kind is Kind.INSERT:
        assert write.reach is None
        return
    assert write.reach is not None
    # As a batch's column (DOCUMENT), or as the writer's binds (EACH, KEYS).
    conditions = {
        fenced_rows(write.reach, shard=s, fence=f) for s, f in [("v.b_shard", "v.b_fence"), (":b_shard", ":b_fence")]
    }
    for dialect, statement in write.statements.items():
        assert any(c in statement.clause.text for c in conditions), f"{write.name} on {dialect}"


@WRITE_PARAMS
def test_a_document_insert_reports_what_it_inserted(write):
    for statement in write.statements.values():
        if write.kind is Kind.INSERT and statement.form is Form.DOCUMENT:
            assert statement.returning is not None and "RETURNING" in statement.returning.text
