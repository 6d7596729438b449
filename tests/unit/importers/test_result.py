"""Job ids for imported entries: readable, and unique within one import."""

from __future__ import annotations

import pytest

from shardcron.importers.result import ID_STEM_CHARS, UniqueIds, id_stem
from shardcron.spec.fields import validate_job_id


@pytest.mark.parametrize(
    "text, expected",
    [
        ("/usr/local/bin/backup.sh --full", "usr-local-bin-backup-sh-full"),
        ("Nightly Report", "nightly-report"),
        ("   ", "job"),
        ("日本語", "job"),
        ("a" * 100, "a" * ID_STEM_CHARS),
    ],
)
def test_an_id_stem_keeps_letters_and_digits_joined_by_dashes(text, expected):
    assert id_stem(text) == expected
    validate_job_id(id_stem(text))


def test_a_stem_taken_already_gets_a_number():
    ids = UniqueIds()
    assert [ids.take("backup") for _ in range(3)] == ["backup", "backup-2", "backup-3"]
    assert ids.take("backup-2") == "backup-2-2"
