"""``shardcron node --tick-retention``: parsed into the node's settings, default none, bad values named."""

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
