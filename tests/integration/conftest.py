"""Fixtures shared by more than one folder of the integration tests."""

import pytest

from tests.support.retention import fill_led_shard


@pytest.fixture
def led(store_engine):
    """A store to prune (tests/support/retention.py): shard 0 led, with finished, running and newest ticks."""
    return fill_led_shard(store_engine)
