"""The `shardcron` parser: one table of commands, flags that read their SHARDCRON_* variable, one --db."""

import argparse
import subprocess
import sys

import pytest

from shardcron.cli import COMMANDS, build_parser, named_command
from shardcron.cli.flags import REMOVED_NODE_FLAGS


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_whole_parser_has_every_command_of_the_table_in_its_order():
    assert list(subcommands(build_parser())) == list(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_anamed_command_gets_its_own_module_only(name):
    got = subcommands(build_parser(name))
    assert name in got
    assert set(got) == {n for n, module in COMMANDS.items() if module == COMMANDS[name]}


@pytest.mark.parametrize(
    "argv, named",
    [
        (["shards", "--json"], "shards"),
        (["--version"], None),
        (["nodse"], None),  # a typo: the whole parser, so argparse can list the commands
        (["jobs", "put", "x"], "jobs"),
        ([], None),
    ],
)
def testnamed_command(argv, named):
    assert named_command(argv) == named


def test_shards_and_nodes_import_neither_grpc_nor_sqlalchemy():
    code = (
        "import sys; from shardcron.cli import build_parser; build_parser('shards'); build_parser('nodes'); "
        "print(sorted(m for m in ('grpc', 'sqlalchemy', 'alembic', 'croniter') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def _all_parsers(parser: argparse.ArgumentParser):
    yield parser
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        for sub in subcommands(parser).values():
            yield from _all_parsers(sub)


def _db_actions() -> dict[str, tuple]:
    """program -> (default, help) of its --db."""
    return {
        p.prog: (a.default, a.help)
        for p in _all_parsers(build_parser())
        for a in p._actions
        if "--db" in a.option_strings
    }


def test_every_db_flag_is_the_same_flag():
    # The benchmarks are the exception: with no --db they make a store of their own, so as never to
    # write into the operator's.
    found = {prog: v for prog, v in _db_actions().items() if not prog.startswith("shardcron bench")}
    assert {
        "shardcron node",
        "shardcron fences",
        "shardcron reshard",
        "shardcron audit",
        "shardcron db upgrade",
        "shardcron db current",
    } <= set(found)
    assert len(set(found.values())) == 1, found
    default, help_ = next(iter(found.values()))
    assert default == "sqlite:///shardcron.db" and "[SHARDCRON_DB]" in help_


def test_node_flags_read_their_variable_and_name_it_in_the_help():
    code = (
        "from shardcron.cli import build_parser; p = build_parser('node'); a = p.parse_args(['node']); "
        "print(a.min_interval, a.db, a.ttl, a.etcd, a.tls_ca)"
    )
    env = {
        "SHARDCRON_MIN_INTERVAL": "5s",
        "SHARDCRON_DB": "sqlite:///x.db",
        "SHARDCRON_TTL": "7",
        "SHARDCRON_ETCD": "10.0.0.1:2379",
        "SHARDCRON_TLS_CA": "ca.pem",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=True)
    assert out.stdout.split() == ["5s", "sqlite:///x.db", "7", "10.0.0.1:2379", "ca.pem"]
    node = subcommands(build_parser("node"))["node"]
    for action in node._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help" and flag not in REMOVED_NODE_FLAGS:  # hidden: refused
                env_name = "SHARDCRON_" + flag[2:].upper().replace("-", "_")
                assert f"[{env_name}]" in action.help, (flag, action.help)


@pytest.mark.parametrize(
    "argv, line",
    [
        (["dev", "--nodes", "0"], "argument --nodes: must be a whole number from 1 to 64, got '0'"),
        (["dev", "--shards", "-2"], "argument --shards: must be a whole number from 1 to 4096, got '-2'"),
        (["dev", "--ttl", "1"], "argument --ttl: must be a whole number from 2 to 3600, got '1'"),
        (
            ["dev", "--for-seconds", "0"],
            "argument --for-seconds: must be a number of seconds more than 0 and at most 315360000, got '0'",
        ),
        (
            ["reshard", "--shards", "4", "--timeout", "0"],
            "argument --timeout: must be a number of seconds more than 0 and at most 315360000, got '0'",
        ),
        (["ticks", "x", "--limit", "0"], "argument --limit: must be a whole number from 1 to 1000000, got '0'"),
        (
            ["jobs", "list", "--request-timeout", "-1"],
            "argument --request-timeout: must be a number of seconds more than 0 and at most 315360000, got '-1'",
        ),
    ],
)
def test_bad_numbers_are_one_line_naming_the_flag_before_anything_starts(argv, line):
    # Checked before any etcd, node or port is touched: these run with nothing listening.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            *argv,
            *(
                ["--server", "127.0.0.1:1"]
                if argv[0] in ("ticks", "jobs")
                else ["--etcd", "127.0.0.1:1"]
                if argv[0] == "reshard"
                else []
            ),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    prog = "shardcron " + " ".join(w for w in argv[:2] if not w.startswith("-") and w != "x")
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"{prog}: error: {line} (see {prog} --help)\n")


def test_the_node_min_interval_is_unset_by_default_and_says_it_takes_the_cluster_s():
    node = subcommands(build_parser("node"))["node"]
    action = next(a for a in node._actions if "--min-interval" in a.option_strings)
    code = "from shardcron.cli import build_parser; print(build_parser('node').parse_args(['node']).min_interval)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "None"  # None: the node takes the cluster's (config.NodeConfig)
    assert "(default the cluster's; 1s for a new cluster)" in action.help and "shardcron config" in action.help


def test_config_reads_no_node_variable_for_its_min_interval():
    # SHARDCRON_MIN_INTERVAL set for the nodes in a shell must not change the cluster by itself.
    code = "from shardcron.cli import build_parser; print(build_parser('config').parse_args(['config']).min_interval)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PATH": "/usr/bin:/bin", "SHARDCRON_MIN_INTERVAL": "5s"},
    )
    assert out.stdout.strip() == "None"


@pytest.mark.parametrize("value", ["fast", "1 fortnight", ""])
def test_config_refuses_a_bad_min_interval_before_it_connects(value, capsys):
    from shardcron.cli import main

    # 127.0.0.1:1 answers nothing: the value is judged first, naming the flag.
    assert main(["config", "--etcd", "127.0.0.1:1", f"--min-interval={value}"]) == 1
    assert capsys.readouterr().err == (
        "shardcron: error: --min-interval: expected a duration such as 1s, 500ms "
        f"or 1m (0: no minimum), got {value!r}\n"
    )
