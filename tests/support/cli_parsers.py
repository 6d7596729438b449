"""The parsers of ``shardcron``'s commands, for tests that check a file's settings against the real flags."""

from __future__ import annotations

import argparse
import re

from shardcron.cli import build_parser

# How add_env_flag ends a flag's help: the variable the flag reads.
_ENV_IN_HELP = re.compile(r"\[(SHARDCRON_[A-Z0-9_]+)\]")


def command_parser(*words: str) -> argparse.ArgumentParser:
    """The parser of ``shardcron WORDS...`` (``"node"``, or ``"db", "upgrade"``); KeyError naming a word it lacks."""
    parser = build_parser()
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def command_env_names(*words: str) -> set[str]:
    """Every SHARDCRON_* variable a flag of ``shardcron WORDS...`` reads (removed flags read none)."""
    return {name for a in command_parser(*words)._actions for name in _ENV_IN_HELP.findall(a.help or "")}
