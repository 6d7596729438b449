"""Logged-in visitors, kept in this node's memory.

The browser holds only a random session id (an HttpOnly, SameSite=Strict
cookie); the token it logged in with stays here, so it never appears in a URL,
a page or a log. Each session has its own CSRF secret, which every action
must echo (``guard.py``). Sessions end after ``idle_s`` without a request, on
logout, or when the node restarts (log in again: the token still works).
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

from shardcron.rules.scopes import Token


@dataclass(frozen=True)
class Session:
    id: str
    secret: str | None  # the API token; None when the node checks no tokens
    token: Token | None
    csrf: str


class Sessions:
    def __init__(self, *, idle_s: float = 8 * 3600, max_sessions: int = 10_000):
        self._idle_s = idle_s
        self._max = max_sessions
        self._by_id: OrderedDict[str, tuple[Session, float]] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, secret: str | None, token: Token | None, now: float) -> Session:
        s = Session(secrets.token_urlsafe(32), secret, token, secrets.token_urlsafe(32))
        with self._lock:
            self._by_id[s.id] = (s, now)
            while len(self._by_id) > self._max:  # the least recently used goes first
                self._by_id.popitem(last=False)
        return s

    def find(self, session_id: str | None, now: float) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            found = self._by_id.get(session_id)
            if found is None:
                return None
            session, last = found
            if now - last > self._idle_s:
                del self._by_id[session_id]
                return None
            self._by_id[session_id] = (session, now)
            self._by_id.move_to_end(session_id)
            return session

    def close(self, session_id: str) -> None:
        with self._lock:
            self._by_id.pop(session_id, None)
