"""Reading a server-sent event stream in a test (the dashboard's live pages and token streams)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx


def sse_events(response: httpx.Response, within_s: float = 60) -> Iterator[tuple[str, str]]:
    """The (event, data) pairs of a server-sent event stream as they come, until it ends; fails after ``within_s``."""
    deadline = time.monotonic() + within_s
    name, data = "", []
    for line in response.iter_lines():
        assert time.monotonic() < deadline, f"the event stream went on for {within_s} s"
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif not line and name:
            yield name, "\n".join(data)
            name, data = "", []
