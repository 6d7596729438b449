"""Debian's chromium, driven by Playwright's Python package: never a downloaded browser build.

Fixtures:
- ``chromium``: one headless browser for the browser tests (``/usr/bin/chromium``; ``make setup`` installs it);
- ``page``: a fresh context and page per test; ``page.console_errors`` collects every console error and
  uncaught page error as it happens;
- ``assert_console_clean(page)``: fails naming them;
- ``shot(page, name)``: a PNG of the page for the README, written to docs/screenshots/ when
  SHARDCRON_UPDATE_SCREENSHOTS=1, else to test-artifacts/pages/ (so a plain run changes no tracked file).

A test that fails with a page open leaves a full-page screenshot in test-artifacts/screenshots/.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium keeps reaching for Google's hosts, which this
# machine's closed network refuses; as root it needs --no-sandbox.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


# Package scope, not session: Playwright's sync API runs an event loop on the main thread while it is
# open, and every later test that calls asyncio.run() would fail with "cannot be called from a running
# event loop". It closes when the last browser test is done.
@pytest.fixture(scope="package")
def chromium():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: run `make setup` (it installs Debian's chromium and chromium-driver), "
            "or apt-get install chromium chromium-driver",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright's Python package is missing: pip install -e '.[dev]' (or `make setup`)", pytrace=False)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, request):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.console_errors = []
    page.on(
        "console",
        lambda m: (
            page.console_errors.append(f"console: {m.text} ({m.location.get('url', '')})")
            if m.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda e: page.console_errors.append(f"uncaught: {e}"))
    request.node.browser_page = page
    yield page
    context.close()


@pytest.fixture
def assert_console_clean():
    def check(page) -> None:
        assert not page.console_errors, "the page logged errors:\n" + "\n".join(page.console_errors)

    return check


@pytest.fixture
def shot():
    target = (
        ROOT / "docs" / "screenshots" if os.environ.get("SHARDCRON_UPDATE_SCREENSHOTS") == "1" else ARTIFACTS / "pages"
    )

    def save(page, name: str) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    page = getattr(item, "browser_page", None)
    if report.when == "call" and report.failed and page is not None and not page.is_closed():
        directory = ARTIFACTS / "screenshots"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / (re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid) + ".png")
        try:
            page.screenshot(path=str(path), full_page=True)
            report.sections.append(("screenshot", str(path)))
        except Exception as e:  # noqa: BLE001 - a page that cannot be drawn must not hide the failure itself
            report.sections.append(("screenshot", f"could not take one: {e}"))
