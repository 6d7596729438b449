import io
import json
import sys
from pathlib import Path

import pytest
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from shardcron.cli import main
from shardcron.jobkey import split_key
from shardcron.spec.jobfile import load_job_file

FIXTURES = Path(__file__).parent / "fixtures"
CRONTAB = str(FIXTURES / "crontab.txt")
CRONJOBS = str(FIXTURES / "cronjobs.yaml")


@pytest.mark.parametrize(
    ("args", "jobs", "summary"),
    [
        (["crontab", CRONTAB], 18, "18 jobs, 10 refused (see the comments)"),
        (["k8s-cronjob", CRONJOBS, "--as", "shell"], 3, "3 jobs, 3 refused (see the comments)"),
        (["k8s-cronjob", CRONJOBS, "--as", "http", "--url", "https://w.example/run"], 4, "4 jobs, 2 refused"),
    ],
)
@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_writes_a_job_file_that_loads(tmp_path, capsys, args, jobs, summary, fmt):
    out = tmp_path / f"jobs.{fmt}"
    assert main(["import", *args, "--format", fmt, "-o", str(out), "--namespace", "team-a"]) == 0
    loaded = load_job_file(str(out))
    assert len(loaded) == jobs and all(split_key(job.id).namespace == "team-a" for job in loaded)
    captured = capsys.readouterr()
    assert captured.out == ""
    last = captured.err.splitlines()[-1]
    if fmt == "json":  # JSON holds no comments: the notes and refusals go to stderr, above the summary
        assert last == summary.split(" (")[0] + " (see above)"
        assert "# refused: " in captured.err
        assert "namespace" in json.loads(out.read_text())
    else:
        assert last.startswith(summary)
        assert "# refused: " in out.read_text()


def test_stdout_by_default(capsys):
    assert main(["import", "crontab", CRONTAB]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# each job is a shell job") and "[[jobs]]" in out


def test_system_flag(tmp_path, capsys):
    crontab = tmp_path / "crontab"
    crontab.write_text("17 * * * * root run-parts /etc/cron.hourly\n")
    assert main(["import", "crontab", str(crontab), "--system"]) == 0
    assert 'command = "run-parts /etc/cron.hourly"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["crontab", "/no/such/crontab"], "/no/such/crontab: cannot read: No such file or directory"),
        (["k8s-cronjob", CRONJOBS, "--as", "http"], "--as http needs --url"),
        (["k8s-cronjob", CRONJOBS, "--as", "shell", "--url", "https://x"], "--as shell takes no --url"),
        (["k8s-cronjob", "BAD"], ": document 1: line 2, column 1: not valid YAML: expected the node content"),
        (["crontab", "EMPTY"], "nothing imported: no entries"),
        (["crontab", "REBOOT"], "nothing imported (see the refusals)"),
        (["crontab", CRONTAB, "--namespace", "Bad Name!"], "--namespace: "),
        (["crontab", CRONTAB, "--timezone", "Mars/Olympus"], "--timezone: unknown timezone 'Mars/Olympus'"),
    ],
)
def test_errors_are_one_line_and_exit_1(tmp_path, capsys, args, error):
    files = {"BAD": "kind: [\n", "EMPTY": "# nothing\n", "REBOOT": "@reboot x\n"}
    args = [str(_write(tmp_path, files[a])) if a in files else a for a in args]
    if args[0] == "k8s-cronjob" and "--as" not in args:
        args += ["--as", "shell"]
    assert main(["import", *args]) == 1
    err = capsys.readouterr().err
    assert error in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith("shardcron: error: ")


def _write(tmp_path, text):
    path = tmp_path / "input"
    path.write_text(text)
    return path


def test_the_other_sources_are_registered(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["import", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("crontab", "k8s-cronjob", "celery-beat", "apscheduler"))


def test_dash_reads_standard_input(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"@hourly echo from-stdin\n")))
    assert main(["import", "crontab", "-"]) == 0
    captured = capsys.readouterr()
    assert 'command = "echo from-stdin"' in captured.out and "# from stdin line 1" in captured.out
    assert captured.err.splitlines()[-1] == "1 job"


def test_celery_beat_and_apscheduler_import_the_project_from_the_current_directory(tmp_path, monkeypatch, capsys):
    """As ``celery -A`` does: the app module and the jobs' functions import from where the command runs."""
    (tmp_path / "cli_beat_app.py").write_text(
        "from celery import Celery\n"
        "app = Celery('proj', broker='redis://127.0.0.1:6379/0')\n"
        "app.conf.beat_schedule = {'nightly': {'task': 'proj.nightly', 'schedule': 60.0}}\n"
    )
    (tmp_path / "cli_aps_tasks.py").write_text("def report():\n    pass\n")
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    with monkeypatch.context() as m:  # on the path only while APScheduler itself writes the store
        m.syspath_prepend(str(tmp_path))
        scheduler = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=url, tablename="my_jobs")})
        scheduler.start(paused=True)
        scheduler.add_job("cli_aps_tasks:report", "interval", minutes=5, id="report")
        scheduler.shutdown(wait=False)
    monkeypatch.delitem(sys.modules, "cli_aps_tasks")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.chdir(tmp_path)

    assert main(["import", "celery-beat", "cli_beat_app:app", "-o", "beat.toml"]) == 0
    assert [job.id for job in load_job_file("beat.toml")] == ["nightly"]
    assert main(["import", "apscheduler", url, "--table", "my_jobs", "-o", "aps.toml"]) == 0
    assert [job.id for job in load_job_file("aps.toml")] == ["report"]
    assert capsys.readouterr().err.splitlines()[-1] == "1 job"
