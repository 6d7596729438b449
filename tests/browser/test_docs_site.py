"""The documentation site in a real browser (Debian's chromium, through Playwright): built with
``mkdocs build --strict`` into a temporary directory, served over HTTP from a thread.

Three checks, as issue 33 asks: the home page and a reference page render without a console
error; the search finds a CLI flag; code blocks carry their language as a class.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading

import pytest

from tests.browser.conftest import ROOT

pytestmark = pytest.mark.browser

FLAG = "lookahead-ms"  # typed without its dashes: a leading "-" tells the search to exclude the word
# After a page loads: the window in which a late script error (the search worker's, say) would surface.
LATE_SCRIPT_ERROR_MS = 300


@pytest.fixture(scope="module")
def docs_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("path", "heading"),
    [("/", "shardcron"), ("/reference/cli/", "Command line"), ("/reference/api/", "gRPC API")],
)
def test_the_page_renders_without_a_console_error(docs_site, page, assert_console_clean, path, heading):
    page.goto(docs_site + path)
    page.wait_for_load_state("load")
    assert page.locator("article h1").first.inner_text().replace("¶", "").strip() == heading
    assert page.locator(".md-nav").count() > 0, "the theme's navigation is missing"
    page.wait_for_timeout(LATE_SCRIPT_ERROR_MS)  # none may surface in it
    assert_console_clean(page)


def test_the_search_finds_a_cli_flag(docs_site, page, assert_console_clean):
    page.goto(docs_site + "/")
    page.locator("input.md-search__input").click()
    page.keyboard.type(FLAG)
    hit = page.locator(".md-search-result__item", has=page.locator("a[href*='reference/cli/']"))
    hit.first.wait_for()
    assert FLAG in hit.first.inner_text(), hit.first.inner_text()
    hit.first.locator("a").first.click()
    page.wait_for_url("**/reference/cli/**")
    # The search's terms are highlighted in <mark>s on arrival, so the cell is compared by its whole text.
    cells = page.locator("td code").evaluate_all("els => els.map(e => e.textContent)")
    assert f"--{FLAG}" in cells
    assert_console_clean(page)


@pytest.mark.parametrize("language", ["sh", "toml", "python"])
def test_code_blocks_carry_their_language_class(docs_site, page, language):
    page.goto(docs_site + "/tutorials/first-job/")
    blocks = page.locator(f"div.language-{language}.highlight pre code")
    assert blocks.count() >= 1, f"no {language} code block with the class language-{language}"
    # Highlighted, not only labelled: Pygments wrapped its tokens in spans.
    assert blocks.first.locator("span").count() > 0
