"""``shardcron db prune --before T`` on every database: what it deletes and keeps, the horizon it records,
the audit afterwards, and bad input refused with one line naming the flag."""

from __future__ import annotations

import json

import pytest

from shardcron.store.retention import shard_horizons_by_shard
from tests.support.commands import admin_command, shardcron
from tests.support.retention import MIN, slots


def test_prune_by_hand_keeps_unfinished_and_newest_ticks_and_records_the_horizon(led, db_url):
    rc, out, err = admin_command("db", "prune", "--db", db_url, "--before", "1970-01-01T00:06:00Z")
    assert (rc, err) == (0, "")
    assert out == "pruned 4 ticks scheduled before 1970-01-01T00:06:00.000Z; horizon recorded on every shard\n"
    assert slots(led, "j") == [4, 6, 7, 8, 9, 10]  # 4 is still running
    assert slots(led, "old") == [1]  # its newest
    assert shard_horizons_by_shard(led) == {0: 6 * MIN, 1: 6 * MIN}

    # Again, with an older time: nothing to do, and the horizon stays where it was.
    assert admin_command("db", "prune", "--db", db_url, "--before", str(2 * MIN))[:2] == (
        0,
        "pruned 0 ticks scheduled before 1970-01-01T00:02:00.000Z; horizon recorded on every shard\n",
    )
    assert shard_horizons_by_shard(led) == {0: 6 * MIN, 1: 6 * MIN}

    rc, out, _ = admin_command("audit", "--db", db_url, "--from", "0", "--to", str(10 * MIN), "--job", "j")
    assert "4 pruned by retention" in out and "retention: this window is partially pruned" in out
    report = json.loads(
        admin_command("audit", "--db", db_url, "--from", "0", "--to", str(10 * MIN), "--job", "j", "--json")[1]
    )
    assert (report["missing"], report["pruned"], report["retention"]) == ([], 4, "partially pruned")


def test_the_horizon_is_held_back_to_the_catch_up_window(led, db_url):
    from shardcron import clock

    now = clock.wall_ms()
    rc, out, err = admin_command("db", "prune", "--db", db_url, "--before", str(now))
    after = clock.wall_ms()
    assert (rc, err) == (0, "")
    assert "shard 0: only before " in out and "held back by a job's catch-up window" in out
    assert now - 3_600_000 <= shard_horizons_by_shard(led)[0] <= after - 3_600_000  # jobs' default window, 1h


@pytest.mark.parametrize(
    "args, says",
    [
        (["--before", "yesterday"], "--before: expected ISO-8601"),
        (["--before", "2999-01-01T00:00:00Z"], "--before: must not be in the future"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(store_engine, db_url, args, says):
    rc, out, err = admin_command("db", "prune", "--db", db_url, *args)
    assert (rc, out) == (1, "") and says in err and err.count("\n") == 1, err


def test_a_batch_out_of_range_is_a_usage_error(store_engine, db_url):
    out = shardcron("db", "prune", "--db", db_url, "--before", "0", "--batch", "5")
    assert (out.returncode, out.stdout) == (2, "")
    assert "argument --batch: must be a whole number from 100 to 10000, got '5'" in out.stderr, out.stderr


def test_the_command_refuses_a_missing_before_and_a_missing_database(tmp_path):
    out = shardcron("db", "prune", "--db", f"sqlite:///{tmp_path}/nothing.db")
    assert out.returncode == 2 and "--before" in out.stderr and "Traceback" not in out.stderr
    out = shardcron("db", "prune", "--db", f"sqlite:///{tmp_path}/nothing.db", "--before", "0")
    assert out.returncode == 1 and "no SQLite database" in out.stderr and "Traceback" not in out.stderr
