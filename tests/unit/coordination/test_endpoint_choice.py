import pytest

from shardcron.coordination.endpoint_choice import next_endpoint

ABC = ["a", "b", "c"]


@pytest.mark.parametrize(
    "labels, failed, failed_at, now, expected, why",
    [
        (ABC, "a", {}, 10.0, "b", "round robin: the next member"),
        (ABC, "c", {}, 10.0, "a", "wraps around"),
        (ABC, "a", {"b": 9.0}, 10.0, "c", "skips a member that failed a moment ago"),
        (ABC, "a", {"b": 1.0}, 10.0, "b", "a member that failed long ago is tried again"),
        (ABC, "a", {"b": 9.5, "c": 9.0}, 10.0, "c", "all others resting: the one that failed longest ago"),
        (ABC, "b", {"a": 9.9, "c": 9.8}, 10.0, "c", "never back onto the member that just failed"),
        (["a"], "a", {"a": 9.0}, 10.0, "a", "one member: nothing to choose"),
        (ABC, "x", {}, 10.0, "a", "an unknown label (the client moved meanwhile): the first"),
        (ABC, "a", {"b": 7.0}, 10.0, "b", "exactly rest_s ago counts as rested"),
    ],
)
def test_next_endpoint(labels, failed, failed_at, now, expected, why):
    assert next_endpoint(labels, failed, failed_at, now, rest_s=3.0) == expected, why
