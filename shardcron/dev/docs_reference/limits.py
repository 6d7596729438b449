"""docs/reference/limits.md: every limit, with the status a call that crosses it gets.

Two kinds of limit, each read from where the code keeps it:
- a node's limits on its callers: the fields of ``api.limits.ApiLimits``, each a ``shardcron node``
  flag of the same name (its default and variable read from the parser). Their status is the one
  ``api.limits.exhausted`` gives; the refusals of the stream and trigger limits are produced here by
  ``StreamSlots`` and ``TriggerBudget`` themselves, and shown as examples;
- the bounds every job's values are held to: the table in ``spec.bounds``' docstring (the spec's one
  statement of them). Their status is the one ``api.status.status_for`` gives an ``InvalidJob``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from shardcron.api import limits
from shardcron.api.status import CallFailed, status_for
from shardcron.dev.docs_reference.cli import commands, describe
from shardcron.dev.docs_reference.markdown import code, table
from shardcron.errors import InvalidJob
from shardcron.spec import bounds


class DriftError(Exception):
    """A limit of ``ApiLimits`` without its flag, or a bounds table that cannot be read."""


def _refusal(call: Callable[[], object]) -> CallFailed:
    try:
        call()
    except CallFailed as e:
        return e
    raise DriftError("the limit did not refuse a call over it")


def examples() -> dict[str, CallFailed]:
    """The refusal of each limit ``api.limits`` enforces itself, by flag."""
    slots = limits.StreamSlots(max_streams=1, max_per_peer=1)
    slots.acquire("ipv4:10.0.0.7:53124", forwarded=False)
    over_node = _refusal(lambda: slots.acquire("ipv4:10.0.0.8:53124", forwarded=False))
    peer = limits.StreamSlots(max_streams=10, max_per_peer=1)
    peer.acquire("10.0.0.7", forwarded=False)
    over_peer = _refusal(lambda: peer.acquire("10.0.0.7", forwarded=False))
    budget = limits.TriggerBudget(limits.parse_rate(limits.DEFAULT_TRIGGER_RATE, "--trigger-rate"))
    rate = limits.parse_rate(limits.DEFAULT_TRIGGER_RATE, "--trigger-rate")
    assert rate is not None
    for _ in range(rate.count):
        budget.take("report", 0)
    over_rate = _refusal(lambda: budget.take("report", 0))
    return {"--max-streams": over_node, "--max-streams-per-peer": over_peer, "--trigger-rate": over_rate}


def api_limits() -> str:
    node = dict(commands())["shardcron node"]
    flags = {a.option_strings[-1]: a for a in node._actions if a.option_strings}
    code_name = limits.exhausted("").code.name
    refused = examples()
    rows = []
    for field in dataclasses.fields(limits.ApiLimits):
        flag = "--" + field.name.replace("_", "-")
        if flag not in flags:
            raise DriftError(f"ApiLimits.{field.name} has no flag {flag} on shardcron node")
        _, variable, default, meaning = describe(node, flags[flag])
        example = refused.get(flag)
        said = f"{meaning}. Refused: {code(example.details)}" if example else meaning
        rows.append([code(flag), code(variable), code(default), code(code_name), said])
    return table(["flag", "variable", "default", "status", "what it bounds"], rows)


def _bounds_rows(doc: str) -> list[list[str]]:
    """The rows of the RST simple table in ``doc``: a row starts where its first column is not blank."""
    lines = doc.splitlines()
    rules = [i for i, text in enumerate(lines) if re.fullmatch(r"=+( +=+)+", text.strip())]
    if len(rules) != 3:
        raise DriftError(f"spec/bounds.py's docstring: expected one table of three rules, found {len(rules)}")
    spans = [m.span() for m in re.finditer(r"=+", lines[rules[0]])]
    rows: list[list[str]] = []
    for text in lines[rules[1] + 1 : rules[2]]:
        cells = [
            text[a : (spans[n + 1][0] if n + 1 < len(spans) else len(text))].strip() for n, (a, _) in enumerate(spans)
        ]
        if cells[0] or not rows:
            rows.append(cells)
        else:
            joined = [
                old + new if old.endswith("-") else f"{old} {new}" for old, new in zip(rows[-1], cells, strict=True)
            ]
            rows[-1] = [cell.strip() for cell in joined]
    return rows


def _rst(text: str) -> str:
    return text.replace("``", "`").replace("<", "&lt;")


def spec_bounds() -> str:
    rows = [[_rst(b), _rst(v), _rst(w)] for b, v, w in _bounds_rows(bounds.__doc__ or "")]
    return table(["bound", "value", "why"], rows)


def render() -> str:
    return (
        "### What a node accepts from its callers\n\n"
        + api_limits()
        + "\n### What every job's values are held to\n\n"
        + "Checked once, where a job is parsed. Through the API a value outside one is refused with "
        + code(status_for(InvalidJob("field", "reason"))[0].name)
        + " naming the field; in a job file, the file is refused naming the file, the job and the field.\n\n"
        + spec_bounds()
    )


__all__ = ["DriftError", "api_limits", "examples", "render", "spec_bounds"]
