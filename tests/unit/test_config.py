"""``shardcron node``'s settings: ``--tick-retention`` parsed, default none, bad values named; removed flags refused."""

from __future__ import annotations

import argparse

import pytest

from shardcron.cli.flags import add_node_flags, node_config_from_args
from shardcron.errors import ConfigError


def settings(*argv: str, env: dict | None = None, monkeypatch=None):
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    p = argparse.ArgumentParser()
    add_node_flags(p)
    return node_config_from_args(p.parse_args(list(argv)))


@pytest.mark.parametrize(
    "argv, ms",
    [
        pytest.param([], None, id="default-keeps-everything"),
        pytest.param(["--tick-retention", "none"], None, id="none"),
        pytest.param(["--tick-retention", "30d"], 30 * 86_400_000, id="days"),
        pytest.param(["--tick-retention", "90s"], 90_000, id="seconds"),
    ],
)
def test_tick_retention(argv, ms):
    assert settings(*argv).tick_retention_ms == ms


def test_tick_retention_from_the_environment(monkeypatch):
    assert settings(env={"SHARDCRON_TICK_RETENTION": "12h"}, monkeypatch=monkeypatch).tick_retention_ms == 43_200_000


@pytest.mark.parametrize("raw, says", [("30 days", "'30 days'"), ("0", "at least 1s"), ("500ms", "at least 1s")])
def test_bad_tick_retention_names_the_flag(raw, says):
    with pytest.raises(ConfigError) as err:
        settings("--tick-retention", raw)
    assert str(err.value).startswith("--tick-retention: ") and says in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["--start-lead-max-ms", "5"],
        ["--start-lead-max-ms=0"],
        ["--dispatcher-priority", "realtime"],
        ["--dispatcher-priority"],
    ],
)
def test_a_removed_flag_is_refused_by_name(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        settings(*argv)
    assert exit_.value.code == 2
    flag = argv[0].split("=")[0]
    assert f"argument {flag}: was removed (" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["SHARDCRON_START_LEAD_MAX_MS", "SHARDCRON_DISPATCHER_PRIORITY"])
def test_a_removed_flags_variable_is_refused_by_name(name, monkeypatch):
    with pytest.raises(ConfigError, match=f"^{name} \\(--.*\\) was removed \\(.*\\); unset it$"):
        settings(env={name: "1"}, monkeypatch=monkeypatch)
