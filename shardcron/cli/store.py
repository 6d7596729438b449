"""The store as the CLI opens it: an engine checked to answer, its schema revision, one line per refused statement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from shardcron.errors import ConfigError, ShardcronError
from shardcron.store.engine import describe_url, make_engine
from shardcron.store.migrate import alembic_config, current_revision, head_revision


class StoreCommandFailed(ShardcronError):
    """The database refused a statement for a reason other than being unreachable (permissions, …)."""


def describe_revision(rev: str | None) -> str:
    """``0001_initial (head)``, ``none (empty database)``, or what to do about any other revision.

    A known revision is named by its migration file (``0001_initial`` for
    revision ``0001``); an unknown one by its id, as stored.
    """
    head = head_revision()
    if rev is None:
        return "none (empty database)"
    name = _revision_name(rev)
    if name is None:
        return f"{rev} (unknown to this shardcron, whose head is {_revision_name(head)}: upgrade shardcron)"
    if rev == head:
        return f"{name} (head)"
    return f"{name} (behind head {_revision_name(head)}: run `shardcron db upgrade`)"


def _revision_name(rev: str) -> str | None:
    """The revision's migration file name without ``.py``; None for a revision this shardcron lacks."""
    from alembic.script import ScriptDirectory  # loaded by this command only (see cli/__init__.py)
    from alembic.util import CommandError  # loaded by this command only (see cli/__init__.py)

    try:
        script = ScriptDirectory.from_config(alembic_config()).get_revision(rev)
    except CommandError:
        return None
    if script is None or script.revision != rev:  # Alembic also resolves unique prefixes
        return None
    stem = Path(script.path).stem
    return stem if stem.startswith(rev) else rev


def require_head(engine: Engine, where: str) -> None:
    """Refuse to read a database whose schema this shardcron does not know (as ``audit`` reads its tables)."""
    with statement_errors(engine):
        rev = current_revision(engine)
    if rev is None:
        raise ConfigError(f"{where} has no shardcron schema (empty database): run `shardcron db upgrade`")
    if rev != head_revision():
        raise ConfigError(f"{where}: schema is {describe_revision(rev)}")


def open_store(url: str, *, create: bool) -> Engine:
    """An engine on ``url``, checked to answer. Unless ``create``, an SQLite file that does
    not exist is an error rather than a new empty database."""
    if not create:
        try:
            u = make_url(url)
        except sa_exc.ArgumentError:
            u = None  # make_engine says why
        if u is not None and u.get_backend_name() == "sqlite":
            path = u.database or ""
            if path and path != ":memory:" and not path.startswith("file:") and not Path(path).exists():
                raise ConfigError(f"no SQLite database at {path} ({describe_url(url)})")
    return make_engine(url)


@contextmanager
def statement_errors(engine: Engine) -> Iterator[None]:
    """A statement the database refused (permissions, a broken schema) becomes one line.

    (Unreachable databases and timeouts are already ``StoreUnavailable``.)
    """
    try:
        yield
    except sa_exc.DBAPIError as e:
        orig = getattr(e, "orig", None) or e
        reason = " ".join(str(orig).split()) or type(orig).__name__
        if engine.url.password:
            reason = reason.replace(str(engine.url.password), "***")
        raise StoreCommandFailed(f"store {describe_url(engine.url)}: {reason}") from None


__all__ = ["StoreCommandFailed", "describe_revision", "open_store", "require_head", "statement_errors"]
