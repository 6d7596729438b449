"""The CLI's own input and output: bounded numbers, bounded file reads, tokens as typed, a closed stdout,
and no traceback for any error that reaches the top."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from shardcron.cli import EXIT_BROKEN_PIPE, EXIT_BUG, main
from shardcron.cli.args import seconds, whole
from shardcron.cli.calendars import read_calendar_file
from shardcron.cli.job_flags import job_from_flags
from shardcron.cli.namespaces import NamespaceFlagError, parse_count, parse_rate
from shardcron.client.channel import ChannelSecurity
from shardcron.client.client import Client
from shardcron.client.targets import BadToken, bearer_secret
from shardcron.errors import ShardcronError
from shardcron.spec.bounds import INT64_MAX, MAX_PAYLOAD_BYTES


def usage_error(argv: list[str], capsys) -> str:
    """The one line a bad flag gets (exit status 2), parsed in this process: nothing is contacted."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# -- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("0", 0), (" 7 ", 7), ("+3", 3), ("100", 100)])
def test_whole_takes_numbers_within_its_bounds(text, value):
    assert whole(0, 100)(text) == value


@pytest.mark.parametrize("text", ["-1", "101", "1.5", "", "ten", "9" * 5000, "99999999999999999999999"])
def test_whole_refuses_what_is_outside_naming_what_was_typed(text):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        whole(0, 100)(text)
    message = str(e.value)
    assert message.startswith("must be a whole number from 0 to 100, got ") and len(message) < 200
    assert repr(text)[:40] in message


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "-inf", "1e400", "315360001", "soon"])
def test_seconds_refuses_zero_negative_infinite_and_absurd(text):
    with pytest.raises(
        argparse.ArgumentTypeError,
        match=r"^must be a number of seconds more than 0 and at most "
        r"315360000, got ",
    ):
        seconds()(text)


def test_seconds_may_allow_zero():
    assert seconds(zero=True)("0") == 0.0 and seconds()("0.25") == 0.25


@pytest.mark.parametrize(
    "argv, says",
    [
        # each of these ended in a traceback deep in protobuf, or in the spec's translation of the flag
        (
            ["jobs", "list", "--shard", "99999999999999"],
            "argument --shard: must be a whole number from 0 to 2147483646, got '99999999999999'",
        ),
        (
            ["jobs", "put", "j", "--every", "1m", "--noop", "--retries", "-3"],
            "argument --retries: must be a whole number from 0 to 99, got '-3'",
        ),
        (
            ["jobs", "put", "j", "--every", "1m", "--celery", "t", "--priority", "256"],
            "argument --priority: must be a whole number from 0 to 255, got '256'",
        ),
        (
            ["jobs", "put", "j", "--every", "1m", "--redis-stream", "s", "--maxlen", "9223372036854775808"],
            f"argument --maxlen: must be a whole number from 1 to {INT64_MAX}, got '9223372036854775808'",
        ),
        (
            ["jobs", "put", "j", "--every", "1m", "--noop", "--history-limit", "0"],
            "argument --history-limit: must be a whole number from 1 to 1000000, got '0'",
        ),
        (
            ["jobs", "put", "j", "--every", "1m", "--noop", "--expected-version", "4294967296"],
            "argument --expected-version: must be a whole number from 0 to 2147483647, got '4294967296'",
        ),
        (
            ["calendars", "put", "f.toml", "--expected-version", "-1"],
            "argument --expected-version: must be a whole number from 0 to 2147483647, got '-1'",
        ),
        (["ticks", "j", "--limit", "1e9"], "argument --limit: must be a whole number from 1 to 1000000, got '1e9'"),
        (["reshard", "--shards", "0"], "argument --shards: must be a whole number from 1 to 2147483647, got '0'"),
        (
            ["audit", "--margin", "inf"],
            "argument --margin: must be a number of seconds at least 0 and at most 315360000, got 'inf'",
        ),
        (
            ["audit", "--grace", "-1"],
            "argument --grace: must be a number of seconds at least 0 and at most 315360000, got '-1'",
        ),
        (
            ["audit", "--clock-tolerance-ms", "-5"],
            "argument --clock-tolerance-ms: must be a whole number from 0 to 315360000000, got '-5'",
        ),
        (
            ["db", "prune", "--before", "0", "--batch", "5"],
            "argument --batch: must be a whole number from 100 to 10000, got '5'",
        ),
        (["dev", "--base-port", "70000"], "argument --base-port: must be a whole number from 1 to 65535, got '70000'"),
    ],
)
def test_every_numeric_flag_is_bounded_and_names_what_was_typed(argv, says, capsys):
    line = usage_error(argv, capsys)
    assert says in line and line.endswith("--help)"), line


def test_retries_become_attempts_only_after_the_bound():
    a = main_args(["jobs", "put", "j", "--every", "1m", "--noop", "--retries", "99"])
    assert job_from_flags(a).retry.max_attempts == 100


def main_args(argv: list[str]) -> argparse.Namespace:
    from shardcron.cli import build_parser

    return build_parser(argv[0]).parse_args(argv)


@pytest.mark.parametrize("flag, text", [("--max-jobs", "9223372036854775808"), ("--max-running", "9" * 5000)])
def test_namespace_counts_fit_the_api(flag, text):
    with pytest.raises(NamespaceFlagError, match=rf"^{flag}: must be a whole number of at least 0 or 'none'") as e:
        parse_count(text, flag)
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("text", ["1e999999999", "1" * 40, "2.5e3", "0x10"])
def test_namespace_rates_are_plain_numbers_refused_before_they_are_built(text):
    # Fraction("1e999999999") builds a billion-digit integer: minutes of CPU before any answer.
    with pytest.raises(NamespaceFlagError, match=r"^--max-slots-per-second: must be a number of at least 0"):
        parse_rate(text, "--max-slots-per-second")


@pytest.mark.parametrize("text", ["9" * 5000, "99999999999999999999", "10000-01-01T00:00:00"])
def test_times_beyond_9999_or_past_int_digits_are_one_line(text):
    from shardcron.cli.common import parse_time_ms

    with pytest.raises(ShardcronError, match=r"^--to: ") as e:
        parse_time_ms(text, "--to")
    assert len(str(e.value)) < 300


# -- files ---------------------------------------------------------------------------------------


def put_with_body_file(path: str) -> subprocess.CompletedProcess:
    # 127.0.0.1:1 answers nothing: the file is judged before any call.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "jobs",
            "put",
            "b",
            "--every",
            "1h",
            "--http",
            "http://127.0.0.1:9/",
            "--body-file",
            path,
            "--server",
            "127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_body_file_without_end_is_refused_at_the_limit():
    # /dev/urandom never ends: reading it whole hung until memory ran out.
    out = put_with_body_file("/dev/urandom")
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        f"shardcron: error: --body-file: /dev/urandom is larger than the body limit of "
        f"{MAX_PAYLOAD_BYTES} bytes (1 MiB)\n"
    )


def test_a_body_file_of_exactly_the_limit_is_taken(tmp_path):
    body = tmp_path / "body"
    body.write_bytes(b"a" * MAX_PAYLOAD_BYTES)
    a = main_args(["jobs", "put", "j", "--every", "1m", "--http", "http://h/", "--body-file", str(body)])
    assert len(job_from_flags(a).executor.http.body) == MAX_PAYLOAD_BYTES
    body.write_bytes(b"a" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(ShardcronError, match=rf"^--body-file: {body} is larger than the body limit"):
        job_from_flags(a)


def test_an_ics_file_without_end_is_refused_at_the_limit(tmp_path):
    endless = tmp_path / "zeros.ics"
    endless.symlink_to("/dev/zero")
    with pytest.raises(ShardcronError, match=r"larger than the limit of 64 MiB"):
        read_calendar_file(str(endless))


# -- tokens --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typed",
    [
        "s3cret\n",
        "s3cret\t",
        " s3cret",
        "\ts3cret \r\n",
        "Bearer s3cret",
        "bearer s3cret\n",
        "BEARER\ts3cret",
        "s3cret",
    ],
)
def test_a_token_is_sent_without_its_surrounding_whitespace_or_scheme(typed):
    assert bearer_secret(typed) == "s3cret"


@pytest.mark.parametrize(
    "typed, says",
    [
        ("s3 cret", "--token holds a space at character 3"),
        ("s3\tcret\n", "--token holds a tab at character 3"),
        ("s3\ncret", "--token holds a line break at character 3"),
        ("s3\x00cret", "--token holds U+0000 at character 3"),
        ("s3cr\u00e9t", "--token holds U+00E9 at character 5"),
        ("  \n", "--token is empty (only whitespace)"),
        ("Bearer", "--token is the word Bearer alone"),
    ],
)
def test_a_token_that_cannot_be_sent_is_refused_before_any_call_without_quoting_it(typed, says):
    with pytest.raises(BadToken) as e:
        bearer_secret(typed, "--token")
    assert str(e.value).startswith(says) and "cret" not in str(e.value)


def test_the_python_client_strips_its_token_too():
    with Client(["127.0.0.1:1"], security=ChannelSecurity(token="Bearer s3cret\n")) as c:
        assert c.security.token == "s3cret"
    with pytest.raises(BadToken):
        Client(["127.0.0.1:1"], security=ChannelSecurity(token="s3 cret"))


def test_the_cli_names_where_a_bad_token_came_from(capsys):
    env = {**os.environ, "SHARDCRON_TOKEN": "s3 cret"}
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "jobs", "list", "--server", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert (out.returncode, out.stderr) == (
        1,
        "shardcron: error: SHARDCRON_TOKEN holds a space at character 3: a "
        "token is printable ASCII with no whitespace inside (check how it "
        "was copied)\n",
    )


# -- the top level ---------------------------------------------------------------------------------


def test_a_closed_stdout_ends_quietly_with_128_plus_sigpipe(tmp_path):
    # `shardcron ... | head`: the reader goes away; Python's flush at exit reported a BrokenPipeError.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "shardcron", "db", "upgrade", "--db", f"sqlite:///{tmp_path}/s.db"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (out.returncode, out.stderr) == (EXIT_BROKEN_PIPE, "")


def test_an_unexpected_error_is_one_line_with_the_way_to_its_traceback(monkeypatch, capsys):
    def boom(a):
        raise KeyError("shard")

    monkeypatch.setattr("shardcron.cli.cmd_nodes", boom)
    monkeypatch.delenv("SHARDCRON_DEBUG", raising=False)
    assert main(["nodes"]) == EXIT_BUG
    err = capsys.readouterr().err
    assert err == (
        "shardcron: error: unexpected KeyError: 'shard' (a bug in shardcron; rerun with "
        "SHARDCRON_DEBUG=1 for the traceback)\n"
    )
    monkeypatch.setenv("SHARDCRON_DEBUG", "1")
    assert main(["nodes"]) == EXIT_BUG
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "KeyError: 'shard'" in err


def test_a_grpc_error_reaching_the_top_is_one_line(monkeypatch, capsys):
    import grpc

    class Refused(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.PERMISSION_DENIED

        def details(self):
            return "not in your namespace"

    def refused(a):
        raise Refused()

    monkeypatch.setattr("shardcron.cli.cmd_nodes", refused)
    assert main(["nodes"]) == 1
    assert capsys.readouterr().err == (
        "shardcron: error: the API call failed: PERMISSION_DENIED: not in your namespace\n"
    )


def test_an_error_message_is_cut_not_echoed_whole(monkeypatch, capsys):
    def huge(a):
        raise ShardcronError("job " + "x" * 10_000_000 + " not found")

    monkeypatch.setattr("shardcron.cli.cmd_nodes", huge)
    assert main(["nodes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("shardcron: error: job xxx") and len(err) < 3000 and err.count("\n") == 1
