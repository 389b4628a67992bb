"""The dashboard's fixtures: ``tfdist ui`` as a real server (a subprocess on 127.0.0.1 and
a free port, its URL and token read from what it prints) and a real headless Chromium
(Debian's package, driven by Playwright with ``executable_path``: Playwright never
downloads a browser here)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TFDIST

CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-default-apps", "--disable-extensions"]
#: Where the browser tests put their screenshots when asked: ``TFDIST_UI_SCREENSHOTS=docs/images``
#: refreshes the docs' pictures; unset, no picture is written.
SCREENSHOTS = os.environ.get("TFDIST_UI_SCREENSHOTS")


@dataclass
class UiServer:
    proc: subprocess.Popen
    base: str
    token: str

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.token}"


def start_ui(env: dict[str, str] | None = None, timeout: float = 60) -> UiServer:
    proc = subprocess.Popen([*TFDIST, "ui", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, **(env or {})))
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        if m:
            return UiServer(proc, m.group(1), m.group(2))
    proc.kill()
    raise AssertionError(f"tfdist ui did not start: {proc.stderr.read() if proc.stderr else ''}")


@pytest.fixture
def ui() -> Iterator[UiServer]:
    server = start_ui()
    yield server
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(10)


def chromium_unavailable() -> str | None:
    if shutil.which("chromium") is None:
        return "Debian's chromium is not installed (apt-get install chromium; .ci/run does)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (the dev extra has it)"
    return None


@pytest.fixture(scope="session")
def browser():  # type: ignore[no-untyped-def]
    reason = chromium_unavailable()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="tfdist-chromium-")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=shutil.which("chromium"), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 860})
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    browser.clear_cookies()
    tab = browser.new_page()
    yield tab
    tab.close()


def screenshot(page, name: str, selector: str | None = None, *,  # type: ignore[no-untyped-def]
               full_page: bool = False) -> None:
    """A small PNG for docs/dashboard.md: the viewport (or one element, or with ``full_page``
    the whole page: a job page outgrew one screen, and a search scrolls it to the log). The
    spec section is left out: it names the test machine's paths (the interpreter, the task
    programs)."""
    if not SCREENSHOTS:
        return
    Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
    page.add_style_tag(content="#spec { display: none; }")
    path = str(Path(SCREENSHOTS) / name)
    if selector:
        page.locator(selector).screenshot(path=path, timeout=120_000)
    else:
        page.screenshot(path=path, timeout=120_000, full_page=full_page)
