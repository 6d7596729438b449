"""The tokens a node accepts: its token file's, plus the store's ``api_tokens``, reloaded when they change.

A node enforces tokens only when it was started with a token file (a cluster
without one checks nothing). The store's tokens are kept in memory. The node
that writes the table reloads its own book at once and bumps ``<prefix>/tokens``
in etcd (``written``); every node watches that key and reloads within one store
read (``TokenWatch``), and reloads every ``RELOAD_S`` anyway, should a bump be
missed while etcd was away. A node without etcd (a stand-in) polls every ``RELOAD_S``.

A reload that finds tokens gone tells ``on_revoked`` subscribers their hashes:
the API's streams and the dashboard's end at once for a revoked token. A reload
that fails keeps the previous book (logged): a store outage must not lock every
caller out, and it delays a revocation only until the store answers again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shardcron.api.tokens import TokenBook
from shardcron.coordination.store_watch import StoreWatch, WatchTask
from shardcron.rules.scopes import Token
from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

log = logging.getLogger(__name__)

RELOAD_S = 2.0  # the backstop reload, should etcd's bump be missed: a revocation is seen within it at worst

Revoked = Callable[[frozenset[str]], None]  # told the secret hashes of the tokens a reload found gone


class NodeTokens:
    """``identify(secret)`` over the file's book and the store's cached one (file first: its names win)."""

    def __init__(
        self,
        file_book: TokenBook,
        load_store: Callable[[], list[Token]] | None = None,
        reload_s: float = RELOAD_S,
        lifeline: Lifeline = UNWATCHED,
    ):
        self.file_book = file_book
        self._lifeline = lifeline
        self._load_store = load_store
        self.reload_s = reload_s
        self._store_book = TokenBook.of(())
        self._lock = threading.Lock()  # one reload at a time; identify reads an immutable book
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: TokenWatch | None = None
        self._listeners: dict[int, Revoked] = {}
        self._next_listener = 0
        self._listeners_lock = threading.Lock()

    def watch(self, etcd, key: str) -> NodeTokens:
        """Reload whenever ``key`` is bumped in etcd (and bump it in ``written``); call before ``start``."""
        self._watch = TokenWatch(etcd, key, self, lifeline=self._lifeline)
        return self

    def on_revoked(self, callback: Revoked) -> Callable[[], None]:
        """Call ``callback`` (from the reloading thread: a worker of the pool the settings' passes run on) with
        the hashes of tokens each reload finds gone; returns the unsubscribe function. It must not block: it
        hands the news to its own loop."""
        with self._listeners_lock:
            key = self._next_listener
            self._next_listener += 1
            self._listeners[key] = callback
        return lambda: self._unsubscribe(key)

    def when_revoked(self, secret_hash: str, loop, act: Callable[[], None]) -> Callable[[], None]:
        """Run ``act`` on ``loop`` (thread-safe) once the token of ``secret_hash`` is revoked; returns the
        unsubscribe function. How a stream on an event loop ends with its token."""

        def heard(revoked: frozenset[str]) -> None:
            if secret_hash in revoked:
                try:
                    loop.call_soon_threadsafe(act)
                except RuntimeError:  # the loop is closed: its server is stopping, the stream with it
                    pass

        return self.on_revoked(heard)

    def _unsubscribe(self, key: int) -> None:
        with self._listeners_lock:
            self._listeners.pop(key, None)

    def written(self, name: str, now_ms: int) -> None:
        """This node wrote token ``name`` to the store: reload here now, then have every node reload."""
        self.reload()
        if self._watch is not None:
            try:
                self._watch.bump(name, now_ms)
            except Exception:  # noqa: BLE001 - the others reload within RELOAD_S anyway
                log.warning(
                    "cannot tell the other nodes that token %r changed; they see it within %.0f s",
                    name,
                    self.reload_s,
                    exc_info=True,
                )

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
                log.warning("cannot reload the API tokens from the store; keeping the ones read before", exc_info=True)
                return
            before = self._store_book
            self._store_book = TokenBook.of(t for t in tokens if self.file_token(t.name) is None)
            gone = frozenset(before.by_hash.keys() - self._store_book.by_hash.keys())
        if gone:
            log.info("tokens revoked: %s; their streams end", ", ".join(sorted(before.by_hash[h].name for h in gone)))
            with self._listeners_lock:
                listeners = list(self._listeners.values())
            for tell in listeners:
                tell(gone)

    def start(self, runner: WatchTask | None = None) -> NodeTokens:
        """Read the store's tokens now; then the watch follows them on ``runner`` (the node's settings task), or
        on a task of its own."""
        self.reload()
        if self._watch is not None:
            self._watch.start(runner)
        elif self._load_store is not None:
            self._thread = self._lifeline.thread(self._run, "token-reload")
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.reload_s):
            crashpoints.fail_worker()
            self.reload()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


class TokenWatch(StoreWatch):
    """Reloads a node's tokens whenever ``<prefix>/tokens`` is bumped, and every RELOAD_S as backstop."""

    def __init__(self, etcd, key: str, tokens: NodeTokens, lifeline: Lifeline = UNWATCHED):
        super().__init__(etcd, key, "token-reload", reload_s=tokens.reload_s, lifeline=lifeline)
        self._tokens = tokens

    def reload(self, cause: str) -> None:
        self._tokens.reload()


__all__ = ["RELOAD_S", "NodeTokens", "Revoked", "TokenWatch"]
