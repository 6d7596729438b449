"""The dashboard in a real browser (Debian's chromium, through Playwright) against a real 3-node cluster.

Each node serves the dashboard; the browser talks to n0's. What a visitor sees is
checked against what the API says, and live updates are checked without a reload:
a marker set on the page's ``window`` before the change must still be there after it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import pytest

from shardcron.api.tokens import hash_secret
from shardcron.dashboard import present
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.jobkey import split_key
from shardcron.spec.job import job_from_dict
from tests.integration.leader.test_deadlines import soon
from tests.support.clusters import stopped_after
from tests.support.databases import create_database
from tests.support.tenancy import hourly_job, token_client

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

SHARDS = 8
TTL = 4
OPS, VIEWER, NODE = "ops-secret-" + "o" * 24, "viewer-secret-" + "v" * 24, "node-secret-" + "n" * 24
WAIT_MS = 60_000  # generous: a loaded 2-core machine


def _token_file(directory: str) -> str:
    path = os.path.join(directory, "tokens")
    with open(path, "w") as f:
        f.write(
            f"ops     {hash_secret(OPS)}     admin  *\n"
            f"viewer  {hash_secret(VIEWER)}  read   *\n"
            f"node    {hash_secret(NODE)}    admin  *\n"
        )
    return path


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("dashboard"))
    url, drop = create_database("sqlite", directory=d)
    c = Cluster(
        etcd_server.endpoints,
        url,
        f"/t{uuid.uuid4().hex[:12]}",
        SHARDS,
        TTL,
        d,
        extra_args=["--auth-token-file", _token_file(d)],
    )
    c.http = {}
    for name in ("n0", "n1", "n2"):
        port = free_port()
        c.http[name] = f"http://127.0.0.1:{port}"
        c.add(name, env={"SHARDCRON_NODE_TOKEN": NODE}, extra_args=["--http-listen", f"127.0.0.1:{port}"])
    with stopped_after(c, drop):
        c.wait_settled({"n0", "n1", "n2"}, 120)
        with token_client(c.nodes["n0"], OPS) as admin:
            for i in range(12):
                admin.put_job(hourly_job(f"nightly-{i:02d}", labels={"team": "data" if i % 2 else "ops"}))
            # Some life for the timeline and the health charts: ticks every second, and failures.
            for i in range(6):
                admin.put_job(job_from_dict({"id": f"heartbeat-{i}", "every": "1s", "executor": {"kind": "noop"}}))
            admin.put_job(
                job_from_dict(
                    {
                        "id": "flaky-endpoint",
                        "every": "2s",
                        "executor": {"kind": "http", "url": "http://127.0.0.1:9/down"},
                    }
                )
            )
        yield c


@pytest.fixture
def base(cluster) -> str:
    return cluster.http["n0"]


def log_in(page, base: str, secret: str, then: str = "/cluster") -> None:
    page.goto(f"{base}{then}")
    page.wait_for_url(re.compile(r"/login"))
    page.fill("input[name=token]", secret)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(then.split("?")[0])))


def mark_page(page) -> None:
    """Set a marker a reload would wipe out."""
    page.evaluate("window.__shardcron_no_reload = 'still here'")


def not_reloaded(page) -> bool:
    return page.evaluate("window.__shardcron_no_reload") == "still here"


def api(cluster, secret=OPS):
    return token_client(cluster.nodes["n0"], secret)


# -- tests -------------------------------------------------------------------------------------


def test_an_anonymous_visitor_gets_the_login_form_and_no_data(cluster, base, page, assert_console_clean):
    for path in ("/cluster", "/jobs", "/job?namespace=default&id=nightly-00", "/health"):
        page.goto(base + path)
        page.wait_for_url(re.compile(r"/login\?next="))
        assert page.locator("#login-form input[name=token]").is_visible()
        shown = page.inner_text("body")  # (the login form keeps the address asked for, to go there after)
        assert "nightly" not in shown and "n1" not in shown and "fence" not in shown, shown
        assert page.locator("#shard-grid, tr[data-job], #job-title, #health-charts").count() == 0
    for path in ("/health.json", "/events/cluster", "/events/job?id=nightly-00"):
        r = page.request.get(base + path, max_redirects=0)
        assert r.status == 401, (path, r.status)
    r = page.request.post(base + "/job/pause", form={"id": "nightly-00", "namespace": "default"}, max_redirects=0)
    assert r.status == 401
    assert_console_clean(page)
    # A wrong token: the form again, saying so (a 401, which the browser's console notes as a failed load).
    page.fill("input[name=token]", "not-a-token")
    page.click("button[type=submit]")
    assert "not known" in page.locator(".flash.error").inner_text()
    assert page.locator("#login-form input[name=token]").is_visible()


def test_the_cluster_page_shows_every_shard_led_and_the_nodes(cluster, base, page, assert_console_clean, shot):
    log_in(page, base, OPS)
    page.wait_for_selector(f'#shard-grid[data-led="{SHARDS}"]', timeout=WAIT_MS)
    cells = page.locator("#shard-grid .shard")
    assert cells.count() == SHARDS
    leaders = {cells.nth(i).get_attribute("data-leader") for i in range(SHARDS)}
    assert leaders <= {"n0", "n1", "n2"} and "" not in leaders
    assert {page.locator("#nodes tbody tr").nth(i).get_attribute("data-node") for i in range(3)} == {"n0", "n1", "n2"}
    # What the API says is what the page shows.
    with api(cluster) as c:
        m = c.shards()
    wait_until(
        lambda: (
            {
                int(cells.nth(i).get_attribute("data-shard")): cells.nth(i).get_attribute("data-leader")
                for i in range(SHARDS)
            }
            == {s["shard"]: s["leader"] for s in c.shards()["shards"]}
        ),
        60,
        0.5,
        "the grid to show the API's leaders",
    )
    assert m["shard_count"] == SHARDS
    assert page.locator("#token-name").inner_text() == "ops"
    shot(page, "cluster")
    assert_console_clean(page)


def test_the_job_list_searches_and_pages_on_the_server(cluster, base, page, assert_console_clean, shot):
    log_in(page, base, OPS, "/jobs")
    rows = page.locator("#job-table tbody tr[data-job]")
    assert rows.count() == 19, "the module's jobs: 12 nightly, 6 heartbeats, 1 flaky"
    with api(cluster) as c:
        wait_until(
            lambda: c.get_job_runs("flaky-endpoint")[1].failures_in_a_row > 0, 60, 0.5, "flaky-endpoint to have failed"
        )
    page.reload()
    assert page.locator('tr.failing[data-job="flaky-endpoint"]').count() == 1, "failures in a row stand out"
    shot(page, "jobs")
    with api(cluster) as c:
        c.put_jobs([hourly_job(f"bulk-{i:03d}") for i in range(120)])
    page.reload()
    assert rows.count() == 50
    page.fill("input[name=q]", "bulk-1")
    wait_until(
        lambda: rows.count() == 20 and rows.first.get_attribute("data-job") == "bulk-100",
        30,
        0.2,
        "the search to narrow the table to bulk-100..bulk-119",
    )
    assert "q=bulk-1" in page.url, "the filter is in the address, so the page can be shared and reloaded"
    page.fill("input[name=q]", "bulk-")
    wait_until(
        lambda: rows.count() == 50 and rows.first.get_attribute("data-job") == "bulk-000",
        30,
        0.2,
        "the first page of bulk-*",
    )
    page.click("#next-page")
    wait_until(lambda: rows.first.get_attribute("data-job") == "bulk-050", 30, 0.2, "the second page")
    page.select_option("select[name=status]", "paused")
    wait_until(lambda: page.locator("#job-table td.empty").count() == 1, 30, 0.2, "no paused bulk job")
    page.goto(base + "/jobs?label=team%3Ddata")
    assert {rows.nth(i).get_attribute("data-job") for i in range(rows.count())} == {
        f"nightly-{i:02d}" for i in range(1, 12, 2)
    }
    page.goto(base + "/jobs?shard=99")
    assert "shard" in page.locator("#job-table .flash.error").inner_text(), "a bad filter is named, not a crash"
    assert_console_clean(page)


def test_pause_and_resume_with_the_buttons_and_the_api_agrees(cluster, base, page, assert_console_clean, shot):
    log_in(page, base, OPS, "/job?namespace=default&id=nightly-03")
    page.on("dialog", lambda d: d.accept())
    page.click("#action-pause")
    page.wait_for_selector("#flash .flash.ok", timeout=WAIT_MS)
    with api(cluster) as c:
        wait_until(lambda: c.get_job("nightly-03").paused, 30, 0.2, "the API to say nightly-03 is paused")
    page.wait_for_selector("#action-resume", timeout=WAIT_MS)  # the page shows it anew
    assert page.locator("#job-state").inner_text() == "paused"
    page.click("#action-resume")
    page.wait_for_selector("#action-pause", timeout=WAIT_MS)
    with api(cluster) as c:
        assert not c.get_job("nightly-03").paused
    assert_console_clean(page)


def test_a_trigger_appears_on_the_timeline_without_a_reload(cluster, base, page, assert_console_clean, shot):
    log_in(page, base, OPS, "/job?namespace=default&id=nightly-05")
    page.wait_for_selector("#timeline .uplot", timeout=WAIT_MS)
    for status, colour in present.STATUS_COLOURS.items():  # present.py's colours, handed to the script
        marker = page.locator(f'#timeline .u-series:has(.u-label:text-is("{status}")) .u-marker')
        assert marker.evaluate("el => getComputedStyle(el).borderTopColor") == _rgb(colour), status
    before = int(page.locator("#timeline").get_attribute("data-points"))
    mark_page(page)
    page.on("dialog", lambda d: d.accept())
    page.click("#action-trigger")
    page.wait_for_selector("#flash .flash.ok", timeout=WAIT_MS)
    page.wait_for_selector('#tick-rows tr[data-status="succeeded"]', timeout=WAIT_MS)
    wait_until(
        lambda: int(page.locator("#timeline").get_attribute("data-points")) > before,
        30,
        0.2,
        "the triggered tick on the timeline",
    )
    assert not_reloaded(page)
    with api(cluster) as c:
        ticks = c.list_ticks("nightly-05")
    manual = [t for t in ticks if t.manual]  # (an hourly slot may also fall due meanwhile)
    assert len(manual) == 1 and manual[0].status.value == "succeeded"
    assert_console_clean(page)
    # The picture: a job that ticks every second, its timeline filling as the page watches.
    page.goto(base + "/job?namespace=default&id=heartbeat-1")
    points = page.locator("#timeline")
    start = int(points.get_attribute("data-points"))
    wait_until(lambda: int(points.get_attribute("data-points")) >= start + 3, 60, 0.2, "live ticks of heartbeat-1")
    shot(page, "job")
    assert_console_clean(page)


def test_a_missed_deadline_is_marked_on_the_timeline_and_the_job_listed_past_it(
    cluster, base, page, assert_console_clean
):
    """A once job whose HTTP call takes 15 s with ``deadline = "1s"``: its slot misses the deadline, recorded
    about 2 s after the slot, and the page, opened while the call still runs, keeps the mark when the
    tick's success arrives live."""
    jid = f"late-report-{uuid.uuid4().hex[:6]}"
    slot = soon(4)
    with Sink() as sink, api(cluster) as c:
        url = sink.url + "/slow/15000"
        c.put_job(job_from_dict({"id": jid, "at_ms": slot, "deadline": "1s", "executor": {"kind": "http", "url": url}}))
        wait_until(
            lambda: c.get_job_runs(jid)[1].last_missed_deadlines == ("deadline",),
            60,
            0.5,
            f"GetJob to say {jid}'s last tick missed its deadline",
        )
        log_in(page, base, OPS, f"/job?namespace=default&id={jid}")
        page.wait_for_selector('#timeline[data-missed="1"]', timeout=WAIT_MS)
        page.wait_for_selector(f'#tick-rows tr[data-slot="{slot}"][data-status="succeeded"]', timeout=WAIT_MS)
        badge = page.locator(f'#tick-rows tr[data-slot="{slot}"] .status.missed')
        assert badge.inner_text() == "missed deadline"
        assert badge.get_attribute("title") == present.MISSED_MEANING["deadline"]
        assert page.locator("#last-missed .status.missed").inner_text() == "missed deadline"
        assert page.locator("#job-deadlines").inner_text() == "succeed within 1s"
        assert page.locator('#timeline[data-missed="1"]').count() == 1, "the live success kept the ring"
        assert page.locator('#timeline .u-series:has(.u-label:text-is("missed a deadline"))').count() == 1

        (listed,) = [runs for job, runs in c.list_jobs_runs() if split_key(job.id).id == jid]
        assert listed.last_missed_deadlines == ("deadline",), "ListJobs says so too"
        assert [t.missed_deadlines for t in c.list_ticks(jid)] == [("deadline",)]
        page.goto(f"{base}/jobs?q={jid}")
        assert page.locator(f'#job-table tr.past-deadline[data-job="{jid}"] .status.missed').count() == 1
        listed_past = page.locator(f'#past-deadline li[data-job="{jid}"]')
        assert "missed deadline" in listed_past.inner_text()
        listed_past.locator("a").click()
        page.wait_for_selector("#job-title")
        assert page.locator("#job-title").inner_text() == jid
        # The list is the cluster's, not the page's: a page of other jobs lists it too.
        page.goto(f"{base}/jobs?q=nightly-")
        assert page.locator(f'#past-deadline li[data-job="{jid}"]').count() == 1
        assert page.locator(f'#job-table tr[data-job="{jid}"]').count() == 0
    assert_console_clean(page)


def test_a_read_token_sees_but_its_pause_is_refused_visibly(cluster, base, page, assert_console_clean):
    log_in(page, base, VIEWER, "/job?namespace=default&id=nightly-07")
    page.on("dialog", lambda d: d.accept())
    page.click("#action-pause")
    error = page.wait_for_selector("#flash .flash.error", timeout=WAIT_MS).inner_text()
    assert "needs role write" in error and "viewer" in error
    with api(cluster) as c:
        assert not c.get_job("nightly-07").paused
    assert_console_clean(page)


def test_actions_need_the_sessions_csrf_token_and_this_origin(cluster, base, page):
    log_in(page, base, OPS)
    form = {"id": "nightly-08", "namespace": "default"}
    r = page.request.post(base + "/job/pause", form=form)
    assert r.status == 403 and "CSRF" in r.text()
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    r = page.request.post(base + "/job/pause", form={**form, "csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert r.status == 403
    with api(cluster) as c:
        assert not c.get_job("nightly-08").paused
    r = page.request.get(base + "/cluster")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert "token=" not in page.url and OPS not in page.content()


def test_the_health_page_draws_the_nodes_metrics(cluster, base, page, assert_console_clean, shot):
    log_in(page, base, OPS, "/health")
    # Samples every 5 s: two give the first interval (a README picture waits for a few more).
    intervals = 6 if os.environ.get("SHARDCRON_UPDATE_SCREENSHOTS") == "1" else 1
    charts = page.locator("#health-charts")
    wait_until(
        lambda: int(charts.get_attribute("data-samples") or 0) >= intervals,
        90,
        0.5,
        f"{intervals} intervals of the node's metrics on the page",
    )
    assert page.locator("#chart-events .uplot").count() == 1
    assert page.locator("#chart-p99 .uplot").count() == 1
    shot(page, "health")
    assert_console_clean(page)


def test_a_drain_shows_live_then_its_undo(cluster, base, page, assert_console_clean):
    log_in(page, base, OPS)
    page.wait_for_selector(f'#shard-grid[data-led="{SHARDS}"]', timeout=WAIT_MS)
    mark_page(page)
    etcd = ["--etcd", cluster.etcd, "--prefix", cluster.prefix]
    drained = subprocess.run(
        [sys.executable, "-m", "shardcron", "drain", "n1", *etcd], capture_output=True, text=True, timeout=60
    )
    assert drained.returncode == 0, drained.stderr
    try:
        page.wait_for_selector('#nodes tr[data-node="n1"] td.draining', timeout=WAIT_MS)
        wait_until(
            lambda: (
                page.locator('#shard-grid .shard[data-leader="n1"]').count() == 0
                and page.locator(f'#shard-grid[data-led="{SHARDS}"]').count() == 1
            ),
            90,
            0.5,
            "n1's shards handed to the others, on the page",
        )
    finally:
        undone = subprocess.run(
            [sys.executable, "-m", "shardcron", "drain", "n1", "--undo", *etcd],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert undone.returncode == 0, undone.stderr
    page.wait_for_selector('#nodes tr[data-node="n1"] td.not-draining', timeout=WAIT_MS)
    wait_until(
        lambda: page.locator('#shard-grid .shard[data-leader="n1"]').count() > 0,
        120,
        0.5,
        "n1 to lead its share again, on the page",
    )
    assert not_reloaded(page)
    assert_console_clean(page)


def test_a_killed_nodes_shards_change_colour_without_a_reload(cluster, base, page, assert_console_clean):
    """Last: it kills n2. n0 serves the page throughout."""
    log_in(page, base, OPS)
    page.wait_for_selector(f'#shard-grid[data-led="{SHARDS}"]', timeout=WAIT_MS)
    victim = "n2"
    cells = page.locator(f'#shard-grid .shard[data-leader="{victim}"]')
    wait_until(lambda: cells.count() > 0, 60, 0.5, f"{victim} to lead a shard on the page")
    theirs = {
        cells.nth(i).get_attribute("data-shard"): cells.nth(i).get_attribute("data-colour")
        for i in range(cells.count())
    }
    mark_page(page)
    cluster.nodes[victim].kill()
    wait_until(
        lambda: (
            page.locator(f'#shard-grid .shard[data-leader="{victim}"]').count() == 0
            and page.locator(f'#shard-grid[data-led="{SHARDS}"]').count() == 1
        ),
        90,
        0.5,
        f"{victim}'s shards to be led by the others on the page",
    )
    for shard, colour in theirs.items():
        cell = page.locator(f'#shard-grid .shard[data-shard="{shard}"]')
        assert cell.get_attribute("data-leader") in ("n0", "n1")
        assert cell.get_attribute("data-colour") != colour, f"shard {shard} kept the dead node's colour"
        shown = cell.evaluate("el => getComputedStyle(el).backgroundColor")
        assert shown != _rgb(colour), f"shard {shard} is still painted {colour}"
    assert not_reloaded(page)
    assert_console_clean(page)


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"
