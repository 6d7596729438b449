"""Page tokens: opaque to callers, and garbage is a ``BadRequest`` naming the field."""

from __future__ import annotations

import pytest

from shardcron.wire.messages import BadRequest, decode_page_token, encode_page_token


def test_page_tokens_round_trip_and_garbage_is_a_bad_request():
    assert decode_page_token(encode_page_token("job/é 1")) == "job/é 1"
    assert decode_page_token("") is None
    with pytest.raises(BadRequest) as e:
        decode_page_token("!!!")
    assert e.value.field == "page_token"
