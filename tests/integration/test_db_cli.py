"""``shardcron db upgrade`` and ``shardcron db current`` on fresh SQLite, PostgreSQL and MariaDB databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from shardcron.cli import admin as admin_cli
from shardcron.store import current_revision, head_revision, make_engine
from shardcron.store.schema import VERSION_TABLE, metadata
from tests.support.commands import admin_command as shardcron

HEAD = "0006_notifications (head)"


def masked(url: str) -> str:
    return admin_cli.describe_url(url)


def test_head_is_named_by_its_migration_file():
    assert head_revision() == "0006"
    assert admin_cli.describe_revision("0006") == HEAD


def test_upgrade_an_empty_database_then_again(db_url):
    make_engine(db_url).dispose()  # SQLite: an empty file (`current` refuses a file that does not exist)
    assert shardcron("db", "current", "--db", db_url) == (0, "none (empty database)\n", "")

    rc, out, err = shardcron("db", "upgrade", "--db", db_url)
    assert (rc, err) == (0, "")
    assert out == f"{masked(db_url)}: upgraded from none (empty database) to {HEAD}\n"
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) == head_revision()
        assert set(metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()

    assert shardcron("db", "current", "--db", db_url) == (0, f"{HEAD}\n", "")
    # A second upgrade is a no-op.
    assert shardcron("db", "upgrade", "--db", db_url) == (
        0, f"{masked(db_url)}: already at {HEAD}; nothing to do\n", "")
    assert shardcron("db", "current", "--db", db_url) == (0, f"{HEAD}\n", "")


def test_the_url_comes_from_shardcron_db(db_url, monkeypatch):
    monkeypatch.setenv("SHARDCRON_DB", db_url)  # read when the parser is built
    assert shardcron("db", "upgrade")[0] == 0
    assert shardcron("db", "current") == (0, f"{HEAD}\n", "")


def test_a_newer_schema_is_reported_and_not_touched(store_engine, db_url):
    with store_engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    rc, out, err = shardcron("db", "current", "--db", db_url)
    assert (rc, err) == (0, "")
    assert out == "9999 (unknown to this shardcron, whose head is 0006_notifications: upgrade shardcron)\n"

    rc, out, err = shardcron("db", "upgrade", "--db", db_url)
    assert (rc, out) == (1, "")
    assert "9999" in err and "upgrade shardcron" in err and err.count("\n") == 1
    assert current_revision(store_engine) == "9999"

    rc, _, err = shardcron("audit", "--db", db_url)  # the audit will not read tables it does not know
    assert rc == 1 and "9999 (unknown" in err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://shardcron:s3cr3t-pw@127.0.0.1:1/cron",
        "mariadb://shardcron:s3cr3t-pw@127.0.0.1:1/cron",
    ],
    ids=["postgresql", "mariadb"],
)
@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_an_unreachable_database_is_one_line_with_the_password_masked(url, command):
    rc, out, err = shardcron("db", command, "--db", url)
    assert (rc, out) == (1, "")
    assert err.startswith("shardcron: error: store ") and err.count("\n") == 1
    assert "shardcron:***@127.0.0.1:1/cron" in err and "s3cr3t-pw" not in err


def test_sqlite_files_that_cannot_be_opened_or_do_not_exist(tmp_path):
    rc, out, err = shardcron("db", "upgrade", "--db", f"sqlite:///{tmp_path}/missing-dir/x.db")
    assert (rc, out) == (1, "") and "missing-dir/x.db" in err and err.count("\n") == 1
    # `current` reads; it does not create an empty database where none was.
    absent = tmp_path / "absent.db"
    rc, out, err = shardcron("db", "current", "--db", f"sqlite:///{absent}")
    assert (rc, out) == (1, "") and f"no SQLite database at {absent}" in err
    assert not absent.exists()


def test_bad_urls_are_one_line():
    rc, _, err = shardcron("db", "current", "--db", "oracle://u:pw@h/db")
    assert rc == 1 and "unsupported store oracle://u:***@h/db" in err


def test_db_commands_through_python_m_shardcron(fresh_db_url):
    """The installed entry point: the result on stdout, exit 0; an unreachable store is exit 1, no traceback."""
    url = fresh_db_url("sqlite")
    repo = Path(__file__).resolve().parents[2]

    def shardcron_process(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "shardcron", *argv], capture_output=True, text=True,
                              timeout=60, cwd=repo)

    up = shardcron_process("db", "upgrade", "--db", url)
    assert (up.returncode, up.stderr) == (0, ""), up.stderr
    assert up.stdout.endswith(f"to {HEAD}\n")
    cur = shardcron_process("db", "current", "--db", url)
    assert (cur.returncode, cur.stdout, cur.stderr) == (0, f"{HEAD}\n", "")

    bad = shardcron_process("db", "current", "--db", "postgresql://shardcron:s3cr3t-pw@127.0.0.1:1/cron")
    assert bad.returncode == 1 and bad.stdout == ""
    assert "Traceback" not in bad.stderr and "s3cr3t-pw" not in bad.stderr and "***" in bad.stderr
