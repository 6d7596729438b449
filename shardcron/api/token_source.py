"""The tokens a node accepts: its token file's, plus the store's ``api_tokens``, reloaded every few seconds.

A node enforces tokens only when it was started with a token file (a cluster
without one checks nothing). The store's tokens are kept in memory and reloaded
every ``RELOAD_S`` by a thread, and at once on the node that wrote the table
(``reload()``): a revoked token is refused by every node within ``RELOAD_S``
plus one store read. A reload that fails keeps the previous book (logged): a
store outage must not lock every caller out, and it delays a revocation only
until the store answers again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shardcron.tenancy.scopes import Token
from shardcron.tenancy.tokens import TokenBook

log = logging.getLogger(__name__)

RELOAD_S = 2.0  # the bound, with one store read, on how long a revoked token keeps working on another node


class NodeTokens:
    """``identify(secret)`` over the file's book and the store's cached one (file first: its names win)."""

    def __init__(self, file_book: TokenBook, load_store: Callable[[], list[Token]] | None = None,
                 reload_s: float = RELOAD_S):
        self.file_book = file_book
        self._load_store = load_store
        self._reload_s = reload_s
        self._store_book = TokenBook.of(())
        self._lock = threading.Lock()  # one reload at a time; identify reads an immutable book
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def identify(self, secret: str) -> Token | None:
        return self.file_book.identify(secret) or self._store_book.identify(secret)

    def file_token(self, name: str) -> Token | None:
        return next((t for t in self.file_book.by_hash.values() if t.name == name), None)

    def reload(self) -> None:
        """Read the store's tokens now (the node that wrote the table calls this)."""
        if self._load_store is None:
            return
        with self._lock:
            try:
                tokens = self._load_store()
            except Exception:  # noqa: BLE001 - keep the previous book; see the module docstring
                log.warning("cannot reload the API tokens from the store; keeping the ones read before",
                            exc_info=True)
                return
            self._store_book = TokenBook.of(t for t in tokens if self.file_token(t.name) is None)

    def start(self) -> NodeTokens:
        self.reload()
        if self._load_store is not None:
            self._thread = threading.Thread(target=self._run, name="token-reload", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._reload_s):
            self.reload()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


__all__ = ["RELOAD_S", "NodeTokens"]
