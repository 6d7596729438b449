from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from shardcron.importers.crontab import import_crontab
from tests.unit.importers.slots import croniter_slots, shardcron_slots

FIXTURE = Path(__file__).parent / "fixtures" / "crontab.txt"
TEXT = FIXTURE.read_text()
RESULT = import_crontab(TEXT, "crontab.txt")
LINES = TEXT.splitlines()

JOBS = [
    # (line, id, cron, timezone, command)
    (8, "usr-local-bin-check-disk-quiet", "*/15 * * * *", "UTC", "/usr/local/bin/check-disk --quiet"),
    (9, "tar-czf-backup-dir-home-tgz-home", "0 2 * * 1-5", "UTC", "tar czf ${BACKUP_DIR}/home.tgz /home"),
    (10, "usr-bin-report-monthly", "30 6 1,15 * *", "UTC", "/usr/bin/report --monthly"),
    (11, "curl-fss-https-example-com-ping", "0 9-17/2 * * 1-5", "UTC", "curl -fsS https://example.com/ping"),
    (12, "usr-bin-rotate-keys", "15 3 * 1,7 *", "UTC", "/usr/bin/rotate-keys"),
    (13, "echo-sunday-roast", "0 12 * * 0", "UTC", 'echo "sunday roast"'),
    (14, "echo-sunday-as-7", "5 0 * * 7", "UTC", "echo sunday-as-7"),
    (15, "echo-the-1st-the-15th-or-a-monday", "0 0 1,15 * 1", "UTC", "echo 'the 1st, the 15th or a Monday'"),
    (16, "usr-bin-happy-new-year", "0 0 1 1 *", "UTC", "/usr/bin/happy-new-year"),
    (17, "usr-bin-happy-new-year-2", "0 0 1 1 *", "UTC", "/usr/bin/happy-new-year"),
    (18, "usr-bin-monthly", "0 0 1 * *", "UTC", "/usr/bin/monthly"),
    (19, "usr-bin-weekly", "0 0 * * 0", "UTC", "/usr/bin/weekly"),
    (20, "date-y-m-d-var-log-days", "0 0 * * *", "UTC", "date +%Y-%m-%d >> /var/log/days"),
    (21, "usr-bin-midnight", "0 0 * * *", "UTC", "/usr/bin/midnight"),
    (22, "usr-bin-hourly", "0 * * * *", "UTC", "/usr/bin/hourly"),
    (
        23,
        "mail-s-daily-root-first-line-second-line",
        "5 4 * * *",
        "UTC",
        "printf %s 'first line\nsecond line\n' | /bin/sh -c 'mail -s \"daily\" root'",
    ),
    (35, "usr-bin-nightly-ny", "30 1 * * *", "America/New_York", "/usr/bin/nightly-ny"),
    (37, "usr-bin-morning", "0 8 * * *", "America/New_York", "/usr/bin/morning"),  # CRON_TZ wins over TZ
]

REFUSED = [
    (24, "@reboot runs once"),
    (25, "only on days matching both"),
    (26, "day of month 'L': L, W and # are not cron syntax"),
    (27, "day of week '5#3'"),
    (28, "a step of '0'"),
    (29, "'61' is outside 0-59"),
    (30, "runs backwards"),
    (31, "write 5-59/10 or 5"),
    (32, "shardcron refuses it: schedule.cron: '0 0 30 2 *' never fires"),
    (33, "expected five schedule fields, then a command"),
]


def test_every_entry_is_a_job_or_refused_in_source_order():
    assert [int(j.source.rsplit(" ", 1)[1]) for j in RESULT.jobs] == [row[0] for row in JOBS]
    assert [int(r.source.rsplit(" ", 1)[1]) for r in RESULT.refused] == [row[0] for row in REFUSED]


@pytest.mark.parametrize(("line", "job_id", "cron", "zone", "command"), JOBS)
def test_jobs(line, job_id, cron, zone, command):
    imported = next(j for j in RESULT.jobs if j.source == f"crontab.txt line {line}")
    assert imported.job == {
        "id": job_id,
        "cron": cron,
        "timezone": zone,
        "overlap": "allow",
        "executor": {"kind": "shell", "command": command},
    }


@pytest.mark.parametrize(("line", "reason"), REFUSED)
def test_refused_keep_line_and_reason(line, reason):
    refused = next(r for r in RESULT.refused if r.source == f"crontab.txt line {line}")
    assert reason in refused.reason
    assert refused.text == LINES[line - 1].strip()


@pytest.mark.parametrize(
    ("line", "note"),
    [
        (9, "uses $BACKUP_DIR, which line 6 set to '/srv/backups'"),
        (8, "PATH=/usr/local/bin:/usr/bin:/bin (line 5)"),
        (8, "SHELL=/bin/bash (line 4); shardcron runs /bin/sh -c"),
        (15, "OR day of week '1'"),
        (23, "stdin"),
        (37, "cron ran it with TZ=Europe/Lisbon (line 36)"),
    ],
)
def test_job_notes(line, note):
    imported = next(j for j in RESULT.jobs if j.source == f"crontab.txt line {line}")
    assert any(note in n for n in imported.notes), imported.notes


@pytest.mark.parametrize(
    "note", ["line 3: MAILTO=ops@example.com", "line 6: BACKUP_DIR=/srv/backups", "line 34: CRON_TZ"]
)
def test_environment_lines_are_file_notes(note):
    assert any(n.startswith(note) for n in RESULT.notes)


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("TZ=Asia/Tokyo\n0 8 * * * x\n", "Asia/Tokyo"),
        ("CRON_TZ=Asia/Tokyo\nTZ=Europe/Lisbon\n0 8 * * * x\n", "Asia/Tokyo"),
        ("0 8 * * * x\nCRON_TZ=Asia/Tokyo\n", "Europe/Berlin"),  # a zone applies to the lines after it
    ],
)
def test_timezone_lines(text, zone):
    assert import_crontab(text, "t", timezone="Europe/Berlin").jobs[0].job["timezone"] == zone


def test_unknown_zone_is_refused_with_shardcrons_reason():
    result = import_crontab("CRON_TZ=Mars/Olympus\n0 8 * * * x\n", "t")
    assert not result.jobs
    assert "shardcron refuses it" in result.refused[0].reason and "Mars/Olympus" in result.refused[0].reason


@pytest.mark.parametrize(
    ("line", "command"),
    [
        (r"0 1 * * * echo 100\%", "echo 100%"),
        ("0 1 * * * cat%", "printf %s '' | /bin/sh -c cat"),
        ("0 1 * * * cat%a%", "printf %s 'a\n' | /bin/sh -c cat"),
        (r"0 1 * * * cat%50\% off", "printf %s '50% off\n' | /bin/sh -c cat"),
        (r"0 1 * * * printf 'a\tb'", r"printf 'a\tb'"),  # other backslashes stay
    ],
)
def test_percent_signs(line, command):
    assert import_crontab(line, "t").jobs[0].job["executor"]["command"] == command


def test_system_crontab_sixth_field_is_a_user():
    result = import_crontab(
        "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n@daily www echo hi\n", "/etc/crontab", system=True
    )
    commands = [j.job["executor"]["command"] for j in result.jobs]
    assert commands == ["cd / && run-parts --report /etc/cron.hourly", "echo hi"]
    assert any("user 'root'" in n for n in result.jobs[0].notes)
    assert any("user 'www'" in n for n in result.jobs[1].notes)
    assert "a user" in import_crontab("17 * * * * root\n", "t", system=True).refused[0].reason


def test_blank_lines_and_comments_are_skipped():
    result = import_crontab("\n   \n# 0 1 * * * not this\n  # nor this\n", "t")
    assert (result.jobs, result.refused) == ([], [])


START = datetime(2026, 10, 20, tzinfo=ZoneInfo("UTC"))


@pytest.mark.parametrize(
    ("line", "zone"),
    [(row[0], row[3]) for row in JOBS] + [(-1, "America/New_York"), (-2, "Europe/Lisbon"), (-3, "America/New_York")],
)
def test_slots_equal_croniters_for_the_source_expression(line, zone):
    """The next 50 slots of each imported job equal croniter's for the line as cron read it."""
    extra = {-1: "*/20 1 * * * x", -2: "30 0-3 * * * x", -3: "0 2 * * sun x"}  # through DST changes
    text = extra[line] if line < 0 else LINES[line - 1]
    job = import_crontab(f"CRON_TZ={zone}\n{text}\n", "t").jobs[0].job
    source_expr = " ".join(text.split()[:1] if text.startswith("@") else text.split()[:5])
    for start in (START, datetime(2027, 3, 10, tzinfo=ZoneInfo("UTC")), datetime(2027, 3, 25, tzinfo=ZoneInfo("UTC"))):
        assert shardcron_slots(job, start) == croniter_slots(source_expr, zone, start)
