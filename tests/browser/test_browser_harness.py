"""The browser fixtures themselves: chromium runs a page's script, a console error is caught (so
``assert_console_clean`` can fail), ``shot`` writes a PNG, and a failing test leaves a screenshot."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

import pytest

pytestmark = pytest.mark.browser

NO_ICON = b'<!doctype html><link rel=icon href="data:,">'  # else the browser asks for /favicon.ico
PAGES = {
    "/ok": NO_ICON + b"<button id=b>click</button><p id=out></p><script src=/ok.js></script>",
    "/ok.js": b"document.getElementById('b').addEventListener('click', () => "
    b"{ document.getElementById('out').textContent = 'clicked'; });",
    "/broken": NO_ICON + b"<p>broken</p><script src=/broken.js></script>",
    "/broken.js": b"undefinedFunction();",
}


@pytest.fixture(scope="module")
def site():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = PAGES.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/javascript" if self.path.endswith(".js") else "text/html")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_click_runs_the_pages_script_and_the_console_stays_clean(site, page, assert_console_clean, shot):
    page.goto(site + "/ok")
    page.click("#b")
    assert page.locator("#out").inner_text() == "clicked"
    assert_console_clean(page)
    path = shot(page, "harness-ok")
    assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_uncaught_error_is_caught_and_fails_the_console_check(site, page, assert_console_clean):
    page.goto(site + "/broken")
    page.wait_for_function("document.readyState === 'complete'")
    assert any("undefinedFunction" in e for e in page.console_errors), page.console_errors
    with pytest.raises(AssertionError, match="undefinedFunction"):
        assert_console_clean(page)


def test_a_failing_page_test_leaves_a_full_page_screenshot(site, tmp_path):
    # A test that fails on purpose, run by a child pytest with these fixtures as a plugin: the hook must
    # write test-artifacts/screenshots/<its node id, sanitised>.png in the repository.
    from tests.browser.conftest import ARTIFACTS, ROOT

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_fails_on_purpose.py").write_text(
        "def test_it(page):\n"
        f"    page.goto({site + '/ok'!r})\n"
        "    assert page.locator('#out').inner_text() == 'never'\n"
    )
    png = ARTIFACTS / "screenshots" / "test_fails_on_purpose.py_test_it.png"
    png.unlink(missing_ok=True)
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.browser.conftest",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_fails_on_purpose.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert child.returncode == 1, child.stdout + child.stderr
        assert "1 failed" in child.stdout and str(png) in child.stdout, child.stdout
        assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        png.unlink(missing_ok=True)
