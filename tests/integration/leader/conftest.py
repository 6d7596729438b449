"""The scheduler tests' fixtures: a fresh SQLite store, a held dev sink, and the stepped-scheduler rig."""

import pytest

from shardcron.model import Job
from shardcron.store import ensure_schema, ensure_shards, make_engine
from tests.support.stepped_scheduler import HeldSink, Rig


@pytest.fixture
def held():
    h = HeldSink()
    yield h
    h.let_go()
    h.sink.stop()


@pytest.fixture
def engine(fresh_db_url):
    e = make_engine(fresh_db_url("sqlite"))
    ensure_schema(e, auto_upgrade=True)
    ensure_shards(e, 1)
    yield e
    e.dispose()


@pytest.fixture
def rig(engine):
    made: list[Rig] = []

    def make(jobs: list[Job], **kw) -> Rig:
        r = Rig(engine, jobs, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()
