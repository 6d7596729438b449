"""The slot table's one setter: the fences published to API threads follow every state change."""

import pytest

from shardcron.coordination.ownership import ShardState
from shardcron.coordination.shard_table import ShardTable


def _lead(table: ShardTable, shard: int, fence: int) -> None:
    slot = table.slots[shard]
    slot.fence = fence
    table.set_state(slot, ShardState.LEADER, "test")


@pytest.mark.parametrize("leaving", [ShardState.RESIGNING, ShardState.IDLE, ShardState.LOST])
def test_a_shard_is_published_while_led_and_unpublished_by_the_change_that_ends_it(leaving):
    table = ShardTable(4)
    _lead(table, 2, 17)
    _lead(table, 0, 5)
    assert table.led_shards() == [0, 2]
    assert (table.leader_fence(0), table.leader_fence(2), table.leader_fence(1)) == (5, 17, None)
    table.set_state(table.slots[2], leaving, "test")
    assert table.led_shards() == [0] and table.leader_fence(2) is None and table.leader_fence(0) == 5


def test_a_candidate_is_not_published():
    table = ShardTable(2)
    table.slots[1].fence = 9
    table.set_state(table.slots[1], ShardState.CANDIDATE, "test")
    assert table.led_shards() == [] and table.leader_fence(1) is None


@pytest.mark.parametrize(
    "state, idle",
    [
        (ShardState.IDLE, True),
        (ShardState.LOST, True),
        (ShardState.CANDIDATE, False),
        (ShardState.LEADER, False),
        (ShardState.RESIGNING, False),
    ],
)
def test_all_idle_means_no_shard_is_queued_led_or_resigning(state, idle):
    table = ShardTable(3)
    table.set_state(table.slots[1], state, "test")
    assert table.all_idle() is idle


def test_renew_gives_a_fresh_slot_for_every_shard_of_the_new_count():
    table = ShardTable(2)
    old = table.slots[0]
    table.set_state(old, ShardState.LOST, "test")
    table.renew(5)
    assert sorted(table.slots) == [0, 1, 2, 3, 4]
    assert table.slots[0] is not old
    assert all(s.state is ShardState.IDLE for s in table.slots.values())
