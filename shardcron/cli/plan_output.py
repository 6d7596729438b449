"""A job file's plan (``rules.job_plan.Plan``) as ``shardcron jobs diff`` and ``apply --dry-run`` print it.

Pure: text for people, one line per job, each changed field indented below its
job as ``field: old -> new`` (values as JSON, so a string reads quoted and a
number does not); and the same as JSON for scripts.
"""

from __future__ import annotations

import json
from typing import Any

from shardcron.jobkey import display_key, split_key
from shardcron.rules.job_plan import ABSENT, SOURCE_LABEL, FieldChange, Plan, file_form

SHOWN_ABSENT = "(absent)"


def plan_text(plan: Plan, file: str, *, prune: bool) -> str:
    """The plan, then a summary line naming the file and the namespaces compared."""
    lines = [f"+ {display_key(j.id)}: to create" for j in plan.created]
    for change in plan.changed:
        lines.append(f"~ {display_key(change.key)}: to change")
        lines += [f"    {field_line(f)}" for f in change.fields]
    unchecked = set(plan.secrets_unchecked)
    lines += [
        f"= {display_key(key)}: unchanged" + (" (secret values not compared)" if key in unchecked else "")
        for key in plan.unchanged
    ]
    gone = "to delete (--prune)" if prune else f"in the cluster, not in {file}"
    for j in plan.not_in_file:
        source = j.labels.get(SOURCE_LABEL)
        lines.append(f"- {display_key(j.id)}: {gone}" + (f" (its {SOURCE_LABEL} is {source})" if source else ""))
    lines.append(summary(plan, file, prune=prune))
    if plan.secrets_unchecked:
        lines.append(
            f"the secret values of {len(plan.secrets_unchecked)} unchanged job(s) were not compared: "
            "that takes a token that may write to their namespace, and writes the servers accept"
        )
    return "\n".join(lines)


def summary(plan: Plan, file: str, *, prune: bool) -> str:
    where = f"{file} against namespace{'s' if len(plan.namespaces) != 1 else ''} {', '.join(plan.namespaces)}"
    if not plan.differs:
        return f"{where}: no difference ({len(plan.unchanged)} unchanged)"
    counts = [
        f"{len(plan.created)} to create",
        f"{len(plan.changed)} to change",
        f"{len(plan.unchanged)} unchanged",
        f"{len(plan.not_in_file)} " + ("to delete" if prune else "not in the file"),
    ]
    return f"{where}: {', '.join(counts)}"


def field_line(change: FieldChange) -> str:
    return f"{change.field}: {shown_value(change.old)} -> {shown_value(change.new)}"


def shown_value(value: Any) -> str:
    return SHOWN_ABSENT if value is ABSENT else json.dumps(value, sort_keys=True, ensure_ascii=False)


def plan_json(plan: Plan, file: str, *, prune: bool) -> dict[str, Any]:
    """The plan for ``--json``: an absent side of a field change is left out (``old`` for a field added)."""

    def ref(key: str) -> dict[str, str]:
        k = split_key(key)
        return {"namespace": k.namespace, "id": k.id}

    return {
        "file": file,
        "namespaces": list(plan.namespaces),
        "differs": plan.differs,
        "prune": prune,
        "created": [{**ref(j.id), "job": file_form(j)} for j in plan.created],
        "changed": [{**ref(c.key), "fields": [_field_json(f) for f in c.fields]} for c in plan.changed],
        "unchanged": [ref(key) for key in plan.unchanged],
        "secrets_unchecked": [ref(key) for key in plan.secrets_unchecked],
        "not_in_file": [{**ref(j.id), "source": j.labels.get(SOURCE_LABEL)} for j in plan.not_in_file],
    }


def _field_json(change: FieldChange) -> dict[str, Any]:
    sides = {"old": change.old, "new": change.new}
    return {"field": change.field, **{k: v for k, v in sides.items() if v is not ABSENT}}


__all__ = ["field_line", "plan_json", "plan_text", "shown_value", "summary"]
