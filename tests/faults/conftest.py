"""Fixtures of the fault suite: a network lab, a PostgreSQL forwarder, one ``FaultCluster`` per test,
and the figures table written at the end of the session.

The suite needs root, ``ip``, ``iptables`` and ``etcdctl``. Without them it
skips with the reason; with the environment variable CI set it fails instead,
because CI runs as root and a silently skipped fault suite proves nothing.

Environment: ``SHARDCRON_FAULT_FIGURES`` (where the figures table goes; default
``tests/faults/FIGURES.md``), ``SHARDCRON_FAULT_LOGS`` (where a failed
scenario's node and etcd logs are copied; default /tmp/shardcron-fault-logs).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from shardcron.dev.sink import Sink
from shardcron.dev.testing.etcd_server import EtcdCluster
from tests.faults import harness
from tests.faults.netns import NetError, NetLab, TcpForwarder, cleanup_stale
from tests.support.databases import SERVER_URLS

FIGURES_PATH = Path(os.environ.get("SHARDCRON_FAULT_FIGURES") or Path(__file__).with_name("FIGURES.md"))
KEEP_DIR = Path(os.environ.get("SHARDCRON_FAULT_LOGS", "/tmp/shardcron-fault-logs"))
_FIGURES: list[dict] = []  # one dict per scenario, in the order they ran


def _cannot_run() -> str | None:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None:
        return (
            f"fault tests need root, ip and iptables (euid={os.geteuid()}, ip={shutil.which('ip')}, "
            f"iptables={shutil.which('iptables')})"
        )
    if shutil.which("etcdctl") is None:
        return "fault tests need etcdctl on PATH (Debian: etcd-client)"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so the fault suite must run, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def fault_lab():
    """The bridge every node namespace hangs off; stale leftovers of crashed runs go first."""
    reason = _cannot_run()
    if reason:
        _skip_or_fail(reason)
    cleanup_stale()
    try:
        lab = NetLab().start()
    except NetError as e:  # root without CAP_NET_ADMIN (an unprivileged container)
        _skip_or_fail(f"cannot create a network lab: {e}")
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture(scope="session")
def pg_forwarder(fault_lab):
    """PostgreSQL (127.0.0.1 only) made reachable on the bridge address for the node namespaces."""
    u = make_url(SERVER_URLS["postgresql"])
    fw = TcpForwarder(fault_lab.gateway, (u.host or "127.0.0.1", u.port or 5432)).start()
    try:
        yield fw
    finally:
        fw.stop()


@pytest.fixture
def figures(request):
    """This scenario's row of the figures table; filled as the test goes, so a failure keeps what it measured."""
    row = {"scenario": request.node.name, "result": "running"}
    _FIGURES.append(row)
    request.node._fault_figures = row
    return row


@pytest.fixture
def fault_cluster(fault_lab, pg_forwarder, fresh_db_url, tmp_path, etcd_prefix, figures, request):
    """``fault_cluster(ttl=4, job_defs=None, slow=0, extra_args=None) -> FaultCluster`` (not started)."""
    made: list[tuple[harness.FaultCluster, EtcdCluster, Sink]] = []

    def make(
        *,
        ttl: int = 4,
        job_defs: list[harness.JobDef] | None = None,
        slow: int = 0,
        extra_args: list[str] | None = None,
        shards: int = harness.SHARDS,
    ) -> harness.FaultCluster:
        etcd = EtcdCluster(3, host=fault_lab.gateway, base_dir=str(tmp_path / "etcd")).start()
        sink = Sink()
        try:
            sink.start(host=fault_lab.gateway)
            db = fresh_db_url("postgresql")
            fc = harness.FaultCluster(
                lab=fault_lab,
                etcd=etcd,
                forwarder=pg_forwarder,
                db_url=db,
                sink=sink,
                tmp_path=tmp_path,
                prefix=etcd_prefix,
                ttl=ttl,
                shards=shards,
                job_defs=job_defs or harness.standard_jobs(sink.url, slow=slow),
                extra_args=extra_args,
                figures=figures,
            )
        except BaseException:
            sink.stop()
            etcd.stop()
            raise
        made.append((fc, etcd, sink))
        return fc

    yield make
    for fc, etcd, sink in made:
        try:
            fc.stop()
        finally:
            for node_id in list(fc.nodes):
                fault_lab.remove(node_id)  # kills anything left inside, deletes the veth and namespace
            sink.stop()
            etcd.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        # pytest keeps only the last few tmp_path trees, and other suites run here too: keep the logs.
        keep = KEEP_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{request.node.name}"
        keep.mkdir(parents=True, exist_ok=True)
        # The soak writes history.json and findings.json beside the logs.
        for log in [
            *tmp_path.glob("*.log"),
            *tmp_path.glob("etcd/*.log"),
            *tmp_path.glob("*.toml"),
            *tmp_path.glob("*.json"),
        ]:
            shutil.copy2(log, keep / log.name)
        print(f"\nfault scenario failed; node and etcd logs kept in {keep}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.when == "call":
        item.rep_call = rep
    row = getattr(item, "_fault_figures", None)
    if row is not None and (rep.when == "call" or rep.failed or rep.skipped):
        if rep.when == "call" or row["result"] == "running":
            row["result"] = "skipped" if rep.skipped else ("passed" if rep.passed else f"FAILED ({rep.when})")
    return rep


def pytest_sessionfinish(session, exitstatus):
    ran = [r for r in _FIGURES if r.get("result") != "skipped"]
    if ran:
        FIGURES_PATH.write_text(harness.figures_markdown(ran))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    ran = [r for r in _FIGURES if r.get("result") != "skipped"]
    if ran:
        terminalreporter.section("fault scenarios: figures")
        terminalreporter.write_line(harness.figures_markdown(ran))
        terminalreporter.write_line(f"(written to {FIGURES_PATH})")
