"""Which etcd member to try after one fails: a pure decision, so it can be table-tested.

A node's threads share one client. When a member dies, several of them fail
on it at about the same time; if each rotated once, two failures could rotate
past a live member and back onto the dead one, and a lease renewal would spend
its last seconds on a member that had just refused. So a failure moves
the client only if it is still on the member that failed, and the move skips
members that failed within ``rest_s``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def next_endpoint(labels: Sequence[str], failed: str, failed_at: Mapping[str, float], now: float, rest_s: float) -> str:
    """The member to use after ``failed`` failed at ``now``.

    Round robin from the one after ``failed``, taking the first that has not
    failed within ``rest_s``; if every other member has, the one that failed
    longest ago (a member that failed once may be back; one that never failed
    comes first). With one member there is nothing to choose.
    """
    if failed not in labels:
        return labels[0]
    start = labels.index(failed)
    others = [labels[(start + i) % len(labels)] for i in range(1, len(labels))]
    if not others:
        return failed
    for label in others:
        if now - failed_at.get(label, float("-inf")) >= rest_s:
            return label
    return min(others, key=lambda label: failed_at.get(label, float("-inf")))
