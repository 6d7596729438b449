import json
import tomllib

import pytest
import yaml

from shardcron.importers.result import Imported, ImportResult, Refused
from shardcron.importers.writer import FORMATS, comment, render
from shardcron.spec.job import job_from_dict
from shardcron.spec.jobfile import load_job_file

AWKWARD = [
    'say "hi"',
    "back\\slash \\n not a newline",
    "two\nlines\r\n",
    "tab\there",
    "unicode: café, 日本, emoji 😀 (past the BMP)",
    "# not a comment",
    "''' and \"\"\" and ${VAR} and `tick`",
    "del \x7f and nul-free control \x1b[0m",
    "yaml: - [a] {b} &c *d ! | > % @",
    "  leading and trailing spaces  ",
]


def _result(commands: list[str]) -> ImportResult:
    jobs = [
        Imported(
            f"line {i}",
            {
                "id": f"job-{i}",
                "cron": "0 2 * * 1-5",
                "timezone": "Europe/Lisbon",
                "overlap": "allow",
                "retry": {"max_attempts": 3, "backoff": "10s"},
                "paused": i % 2 == 0,
                "labels": {"from": command} if command.isprintable() else {},
                "executor": {"kind": "shell", "command": command},
            },
            notes=(f"note about {command}",),
        )
        for i, command in enumerate(commands)
    ]
    refused = [Refused("line 99", "a reason\nover two lines", "@reboot x\n  more # text")]
    return ImportResult(jobs=jobs, refused=refused, notes=["MAILTO=ops@example.com", "a note\x00with nul"])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("namespace", [None, "team-a"])
def test_round_trip_gives_exactly_the_imported_jobs(tmp_path, fmt, namespace):
    result = _result(AWKWARD)
    path = tmp_path / f"jobs.{fmt}"
    path.write_text(render(result, fmt, namespace).text, encoding="utf-8")
    expected = [
        job_from_dict({**j.job, **({"namespace": namespace} if namespace else {})}, require_executor=True)
        for j in result.jobs
    ]
    assert load_job_file(str(path)) == expected


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_comments_hold_every_note_and_refusal(fmt):
    text = render(_result(["echo hi"]), fmt).text
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[:2] == ["# MAILTO=ops@example.com", "# a note\\u0000with nul"]
    assert "# from line 0" in comments and "# note: note about echo hi" in comments
    assert "# refused: line 99: a reason\\nover two lines" in comments
    assert comments[-2:] == ["#   | @reboot x", "#   |   more # text"]
    assert text.index("# from line 0") < text.index("echo hi") < text.index("# refused")


def test_json_returns_its_comments_beside_the_text():
    rendered = render(_result(["echo hi"]), "json", "ns")
    data = json.loads(rendered.text)
    assert list(data) == ["namespace", "jobs"] and data["jobs"][0]["id"] == "job-0"
    assert "MAILTO=ops@example.com" in rendered.comments
    assert "job-0 (line 0): note about echo hi" in rendered.comments
    assert "refused: line 99: a reason\nover two lines" in rendered.comments


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_jobs_is_still_a_job_file(tmp_path, fmt):
    path = tmp_path / f"jobs.{fmt}"
    path.write_text(render(ImportResult(refused=[Refused("l1", "why", "x")]), fmt).text, encoding="utf-8")
    assert load_job_file(str(path)) == []


@pytest.mark.parametrize("text", ["a\nb", "x\ry", "\x00", "\u2028", "tab\tok"])
def test_comment_is_one_line_that_toml_and_yaml_read_as_nothing(text):
    line = comment(text)
    assert len(line.splitlines()) == 1
    assert tomllib.loads(line + "\n") == {} and yaml.safe_load(line + "\n") is None


def test_yaml_has_no_aliases_even_for_shared_values():
    shared = {"kind": "shell", "command": "x"}
    result = ImportResult(
        jobs=[
            Imported("a", {"id": "a", "every": "1m", "executor": shared}),
            Imported("b", {"id": "b", "every": "1m", "executor": shared}),
        ]
    )
    assert "&" not in render(result, "yaml").text
