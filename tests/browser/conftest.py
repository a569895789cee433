"""A headless Chromium (Debian's, driven by Playwright) for the browser tests.

Playwright's own browser download is never used: the Makefile's ``install-system``
target installs Debian's ``chromium`` package, and the tests launch that binary.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    # CI runs as root, and Chromium refuses to start as root with its sandbox on.
    "--no-sandbox",
    # No GPU, no QUIC, no first-run UI: a headless test of plain-HTTP pages needs none.
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Chromium's own background traffic (component updates, sync, field trials): on
    # machines without general internet access (CI's among them), Chromium's
    # connections, the live server's included, are refused unless it is off.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Every wait (a navigation, a click, an expect) gives up after this long.
TIMEOUT_MS = 15_000
#: Starting Chromium the first time on a cold machine is slower than any page load.
LAUNCH_TIMEOUT_MS = 60_000


@pytest.fixture
def artifacts_dir() -> Path:
    """Where screenshots go: ``$DURABLE_JOBS_ARTIFACTS/browser`` (default ``<repo>/artifacts``).

    Kept after the run (not in tmp_path) so that CI can publish them and a person can
    look at what the browser saw.
    """
    base = Path(os.environ.get("DURABLE_JOBS_ARTIFACTS") or ROOT / "artifacts")
    directory = base / "browser"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        # Fail, never skip: a skipped browser test looks like a passing one in CI.
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}. Run `make install-system` "
            "(as root; it runs apt-get install chromium), or use `make test`, which does.",
            pytrace=False,
        )
    # Playwright's sync API keeps its asyncio loop marked as running in this thread
    # between calls, so Django's async-safety check would refuse every ORM call the
    # test makes. The check guards against blocking a loop that has other work; here
    # the loop only runs inside a Playwright call, never while the ORM does.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        # launch() gives Chromium a fresh temporary profile and removes it on close.
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            timeout=LAUNCH_TIMEOUT_MS,
        )
        try:
            yield chromium
        finally:
            chromium.close()
            # While that loop runs, Django keeps this thread's database connections apart
            # from its usual ones (asgiref's Local sees an async context), so the test's
            # ORM calls opened a connection of their own. Close it while the loop still
            # runs, or it stays open and PostgreSQL refuses to drop the test database.
            connections.close_all()


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    """A new page on the live server: relative URLs go to it; every wait is bounded."""
    context = browser.new_context(
        base_url=str(live_server), viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(TIMEOUT_MS)
    # expect() has its own default (5 s), too short for a loaded CI machine.
    expect.set_options(timeout=TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()
