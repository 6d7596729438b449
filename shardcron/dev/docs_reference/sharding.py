"""docs/reference/sharding.md: the sharding rule as the code has it, and its test vectors.

The rule is the source of ``shardcron.sharding.shard_for`` itself. The vectors are
``tests/vectors/shards.json``'s, each checked against the code before it is shown
(``shard_for``, and ``spec.namespaces`` for a namespaced key's bytes): a vector the
code disagrees with stops the generator.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from shardcron.dev.docs_reference.markdown import code, table
from shardcron.sharding import shard_for
from shardcron.spec.namespaces import JobKey, shard_key_bytes, shard_of

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "shards.json"
SHOWN_CHARS = 32


class DriftError(Exception):
    """A vector of tests/vectors/shards.json that the code does not reproduce."""


def _id(text: str) -> str:
    """A job id or namespace as a JSON string (white space visible), a long one cut with its length."""
    if len(text) <= SHOWN_CHARS:
        return code(json.dumps(text, ensure_ascii=False))
    return code(json.dumps(text[:SHOWN_CHARS], ensure_ascii=False)[:-1] + "…") + f" ({len(text)} characters)"


def _check(v: dict[str, Any]) -> None:
    if "namespace" in v:
        key = JobKey(v["namespace"], v["id"])
        ok = shard_key_bytes(key).hex() == v["key_hex"] and shard_of(key, 2**32) == v["hash"]
        ok = ok and shard_of(key, v["shard_count"]) == v["shard"]
    else:
        ok = shard_for(v["id"], 2**32) == v["hash"] and shard_for(v["id"], v["shard_count"]) == v["shard"]
    if not ok:
        raise DriftError(f"{VECTORS}: the code does not reproduce the vector {v!r}")


def _pivot(
    vectors: list[dict[str, Any]], who: tuple[str, ...]
) -> tuple[list[int], dict[tuple[Any, ...], dict[int, int]]]:
    counts = sorted({v["shard_count"] for v in vectors})
    rows: dict[tuple[Any, ...], dict[int, int]] = {}
    for v in vectors:
        _check(v)
        rows.setdefault(tuple(v[k] for k in who), {})[v["shard_count"]] = v["shard"]
    return counts, rows


def render() -> str:
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    rule = inspect.getsource(shard_for).strip()
    counts, plain = _pivot(data["vectors"], ("id", "hash"))
    out = [
        "### The rule\n",
        f"{data['hash']}:\n",
        f"```python\n{rule}\n```\n",
        f"The key of a job in a namespace: {data['namespaced_key']}.\n",
        "### Vectors: ids\n",
        table(
            ["id", "hash", *(f"shard of {n}" for n in counts)],
            ([_id(i), str(h), *(str(s[n]) for n in counts)] for (i, h), s in plain.items()),
        ),
    ]
    counts, spaced = _pivot(data["namespaced_vectors"], ("namespace", "id", "key_hex", "hash"))
    out += [
        "\n### Vectors: namespaced keys\n",
        table(
            ["namespace", "id", "key (hex, cut)", "hash", *(f"shard of {n}" for n in counts)],
            (
                [_id(ns), _id(i), code(k if len(k) <= 2 * SHOWN_CHARS else k[: 2 * SHOWN_CHARS] + "…"), str(h)]
                + [str(s[n]) for n in counts]
                for (ns, i, k, h), s in spaced.items()
            ),
        ),
    ]
    return "\n".join(out)


__all__ = ["VECTORS", "DriftError", "render"]
