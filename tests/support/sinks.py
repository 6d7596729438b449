"""Fixtures for tests that send real HTTP requests to the dev sink (shardcron.dev.sink); a plugin of tests/conftest.py,
so no proxy set in the environment swallows any test's calls to localhost."""

from __future__ import annotations

import pytest

from shardcron.dev.sink import Sink

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_for_localhost(monkeypatch):
    # The executor honours the proxy variables: one set in the environment must not swallow calls to the sink.
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def sink():
    with Sink() as s:
        yield s
