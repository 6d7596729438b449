"""The browser fixtures themselves: chromium runs a page's script, a console error is caught (so
``assert_console_clean`` can fail), and screenshots are written."""

from __future__ import annotations

import http.server
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
