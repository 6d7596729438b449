"""``shardcron db upgrade`` and ``shardcron db current`` on fresh SQLite, PostgreSQL and MariaDB databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from shardcron.cli.store import describe_revision
from shardcron.store import current_revision, head_revision, make_engine
from shardcron.store.engine import describe_url
from shardcron.store.schema import VERSION_TABLE, metadata
from tests.support.commands import admin_command as shardcron

# The newest migration file, as `db current` names it: "0003_calendars (head)".
HEAD_FILE = sorted(
    p.stem
    for p in (Path(__file__).resolve().parents[3] / "shardcron/store/migrations/versions").glob(
        "[0-9][0-9][0-9][0-9]_*.py"
    )
)[-1]
HEAD = f"{HEAD_FILE} (head)"


def masked(url: str) -> str:
    return describe_url(url)


def test_head_is_named_by_its_migration_file():
    assert head_revision() == HEAD_FILE[:4]
    assert describe_revision(HEAD_FILE[:4]) == HEAD


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
        0,
        f"{masked(db_url)}: already at {HEAD}; nothing to do\n",
        "",
    )
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
    assert out == f"9999 (unknown to this shardcron, whose head is {HEAD_FILE}: upgrade shardcron)\n"

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
    repo = Path(__file__).resolve().parents[3]

    def shardcron_process(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "shardcron", *argv], capture_output=True, text=True, timeout=60, cwd=repo
        )

    up = shardcron_process("db", "upgrade", "--db", url)
    assert (up.returncode, up.stderr) == (0, ""), up.stderr
    assert up.stdout.endswith(f"to {HEAD}\n")
    cur = shardcron_process("db", "current", "--db", url)
    assert (cur.returncode, cur.stdout, cur.stderr) == (0, f"{HEAD}\n", "")

    bad = shardcron_process("db", "current", "--db", "postgresql://shardcron:s3cr3t-pw@127.0.0.1:1/cron")
    assert bad.returncode == 1 and bad.stdout == ""
    assert "Traceback" not in bad.stderr and "s3cr3t-pw" not in bad.stderr and "***" in bad.stderr


def test_a_store_written_at_the_first_revision_upgrades_to_head_with_nothing_lost(db_url):
    """Every later revision carries a store that already holds jobs and ticks forward: rows kept,
    and the unresolved ones still found where a new leader looks for them."""
    from alembic import command

    from shardcron.store import last_ticks, unresolved_ticks
    from shardcron.store.migrate import alembic_config

    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0001")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO jobs (id, shard, spec, version, paused, fence, node_id, created_at_ms, "
                    "updated_at_ms, active_since_ms) VALUES ('nightly', 3, '{}', 1, :no, 7, 'n1', 0, 0, 0)"
                ),
                {"no": False},
            )
            for at, status, manual in [
                (1000, "succeeded", False),
                (2000, "claimed", False),
                (3000, "running", False),
                (4000, "failed", True),
            ]:
                conn.execute(
                    text(
                        "INSERT INTO ticks (job_id, scheduled_at_ms, shard, fence, node_id, status, "
                        "attempt, manual) VALUES ('nightly', :at, 3, 7, 'n1', :status, 1, :manual)"
                    ),
                    {"at": at, "status": status, "manual": manual},
                )
        assert current_revision(engine) == "0001"

        rc, out, err = shardcron("db", "upgrade", "--db", db_url)
        assert (rc, err) == (0, ""), err
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM ticks")).scalar_one() == 4
        assert [(t.scheduled_at_ms, t.status.value) for t in unresolved_ticks(engine, 3)] == [
            (2000, "claimed"),
            (3000, "running"),
        ]
        assert last_ticks(engine, 3) == {"nightly": 3000}  # the manual run at 4000 is not where it left off
    finally:
        engine.dispose()


def test_namespaces_arrive_with_every_stored_job_in_default_and_its_usage_counted(db_url):
    """0006 -> 0007: no job or tick changes, every job is in ``default``, and default's usage row
    counts the jobs and sums their peak rates exactly (10 s + every minute + a one-off: 1/10 + 1/60)."""
    from fractions import Fraction

    from alembic import command

    from shardcron.spec.job import job_from_dict, job_to_json
    from shardcron.store import get_job, list_jobs
    from shardcron.store.migrate import alembic_config

    specs = {"every-10s": {"every": "10s"}, "minutely": {"cron": "0 * * * * *"}, "once": {"at": "2031-01-01T00:00:00Z"}}
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0006")
        with engine.begin() as conn:
            for job_id, when in specs.items():
                spec = job_to_json(job_from_dict({"id": job_id, **when}))
                conn.execute(
                    text(
                        "INSERT INTO jobs (id, shard, spec, version, paused, fence, node_id, created_at_ms, "
                        "updated_at_ms, active_since_ms) VALUES (:id, 1, :spec, 1, :no, 7, 'n1', 0, 0, 0)"
                    ),
                    {"id": job_id, "spec": spec, "no": False},
                )
            conn.execute(
                text(
                    "INSERT INTO ticks (job_id, scheduled_at_ms, shard, fence, node_id, status, attempt, "
                    "manual) VALUES ('every-10s', 1000, 1, 7, 'n1', 'succeeded', 1, :no)"
                ),
                {"no": False},
            )

        rc, out, err = shardcron("db", "upgrade", "--db", db_url)
        assert (rc, err) == (0, ""), err
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM ticks")).scalar_one() == 1
            assert sorted(conn.execute(text("SELECT id, namespace FROM jobs")).all()) == [
                ("every-10s", "default"),
                ("minutely", "default"),
                ("once", "default"),
            ]
            row = conn.execute(
                text("SELECT weight, jobs, slots_per_second FROM namespaces WHERE name = 'default'")
            ).one()
        assert (row.weight, row.jobs, Fraction(row.slots_per_second)) == (1.0, 3, Fraction(1, 10) + Fraction(1, 60))
        assert get_job(engine, "minutely").schedule.cron == "0 * * * * *"
        assert {j.id for j in list_jobs(engine, namespaces={"default"})} == set(specs)
        assert list_jobs(engine, namespaces={"team-a"}) == []
    finally:
        engine.dispose()
