"""A call's deadline on the node: the caller's, less a margin to answer in (30 s when it set none)."""

from __future__ import annotations

import pytest

from shardcron.api.routing import Deadline


class _Ctx:
    def __init__(self, remaining):
        self._remaining = remaining

    def time_remaining(self):
        return self._remaining


@pytest.mark.parametrize("remaining, expected", [(None, 29.8), (1e9, 29.8), (1.0, 0.9), (0.1, 0.09)])
def test_deadline_defaults_to_30s_and_leaves_a_margin_to_answer(remaining, expected):
    assert Deadline.of(_Ctx(remaining)).remaining() == pytest.approx(expected, abs=0.02)
