"""docs/reference/cli.md: every command and flag, read from the argparse parsers ``shardcron`` itself builds.

A flag's variable is the ``[SHARDCRON_...]`` its help names (``cli/flags.add_env_flag``
writes it there), or, failing that, ``SHARDCRON_<FLAG>`` when the help names that one.
Its default is the ``(default ...)`` its help ends with, else the parser's own default.
The parsers read ``SHARDCRON_*`` from the environment as their defaults, so they are
built here with none set: the page shows the defaults of a clean shell.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from shardcron.cli import build_parser
from shardcron.cli.flags import ENV_PREFIX, env_name
from shardcron.dev.docs_reference.markdown import code, table

_VARIABLE = re.compile(r"\s*\[(" + ENV_PREFIX + r"[A-Z0-9_]+)\]")
_DEFAULT = re.compile(r"\s*\(default:? (.*)\)\s*$")


@contextmanager
def clean_environment() -> Iterator[None]:
    """No ``SHARDCRON_*`` variable set while the parsers are built (they read them as defaults)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


def commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser, ``shardcron`` first, depth first in the order ``--help`` lists them."""
    with clean_environment():
        root = build_parser()
    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(f"{name} {sub}", child)

    walk("shardcron", root)
    return found


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)


def describe(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, str, str, str]:
    """(flag, variable, default, meaning) of one argument."""
    text = _help(parser, action)
    metavar = action.metavar if isinstance(action.metavar, str) else None
    flag = ", ".join(action.option_strings) if action.option_strings else (metavar or action.dest)
    if action.option_strings and metavar:
        flag += f" {metavar}"
    variable = ""
    m = _VARIABLE.search(text)
    if m:
        variable = m.group(1)
        text = text[: m.start()] + text[m.end() :]
    elif action.option_strings and env_name(action.option_strings[-1]) in text:
        variable = env_name(action.option_strings[-1])
    default = ""
    m = _DEFAULT.search(text)
    if m:
        default, text = m.group(1), text[: m.start()]
    elif action.nargs == 0 and action.default is False:
        default = "off"
    elif action.default not in (None, argparse.SUPPRESS, []) and not isinstance(action.default, bool):
        default = str(action.default)
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    if not action.option_strings and action.required is False and action.nargs in ("?", "*"):
        text += " (optional)"
    return flag, variable, default, text.strip()


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.help != argparse.SUPPRESS
        and not isinstance(a, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction)
    ]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            out += [(name, helps.get(name, "")) for name in action.choices]
    return out


def _default(text: str) -> str:
    """A default as a code span when it is a value (``64``, ``/cron``), as plain text when it is a sentence."""
    if not text:
        return ""
    return code(text) if len(text.split()) == 1 else text


def render() -> str:
    parts: list[str] = []
    for name, parser in commands():
        level = "#" * (2 + max(1, name.count(" ")))  # shardcron and its commands ###, their subcommands ####
        parts.append(f"{level} {name}\n")
        if parser.description and name != "shardcron":
            parts.append(" ".join(parser.description.split()) + "\n")
        subs = _subcommands(parser)
        if subs:
            parts.append(table(["command", "what"], [[code(f"{name} {sub}"), text] for sub, text in subs]))
        rows = []
        for action in _arguments(parser):
            flag, variable, default, meaning = describe(parser, action)
            rows.append([code(flag), code(variable) if variable else "", _default(default), meaning])
        if rows:
            parts.append(table(["flag", "variable", "default", "meaning"], rows))
    return "\n".join(parts)


__all__ = ["clean_environment", "commands", "describe", "render"]
