"""The console's browser tests: a real ``agentkeep serve`` process and Debian's headless
Chromium driven by Playwright for Python (never Playwright's own browser download).

Chromium comes from ``scripts/browser-deps`` (the Makefile runs it before the suite); a
machine without ``/usr/bin/chromium`` fails these tests with that instruction rather than
skipping them. Each test gets a fresh ``--user-data-dir``. Screenshots go to the test's
temporary directory, or to ``$AGENTKEEP_CONSOLE_SCREENSHOTS`` (how docs/console/ is made).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright
from tests.unit.subprocesses import AGENTKEEP, first_line

CHROMIUM = os.environ.get("AGENTKEEP_CHROMIUM", "/usr/bin/chromium")
#: Chromium's flags on these machines (their network is closed: no background traffic).
FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
TIMEOUT = 30.0
#: Local models for the daemon: ``fast`` streams quickly, ``slow`` slowly enough to watch
#: (and to reload the page or cancel in the middle of a turn).
PROVIDERS = """
[providers.fast]
kind = "gym"
class = "responding"
model = "gym-1"
latency_seconds = 0.15

[providers.slow]
kind = "gym"
class = "responding"
model = "gym-1"
latency_seconds = 1.5
"""


@dataclass
class Daemon:
    """A running ``agentkeep serve``: its URL, its printed sign-in link, a token client."""

    process: subprocess.Popen[str]
    url: str
    signin: str
    api: httpx.Client

    def take_link(self) -> str:
        """The sign-in link ``serve`` printed, the first time; later a fresh one-time link
        made with the token (``POST /v1/console/links``): each works once."""
        if self.signin:
            link, self.signin = self.signin, ""
            return link
        made = self.api.post("/v1/console/links")
        assert made.status_code == 201, made.text
        return self.url + str(made.json()["path"])

    def events(self, session_id: str) -> list[dict[str, Any]]:
        """The session's whole ledger, through the API."""
        found: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.api.get(
                f"/v1/sessions/{session_id}/events", params={"after": after, "limit": 1000}
            ).json()
            found += page["events"]
            if page["nextAfter"] is None:
                return found
            after = page["nextAfter"]

    def stop(self) -> None:
        """SIGTERM, and wait for a clean exit (killed if it hangs)."""
        self.api.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()


def start_daemon(home: Path, port: int = 0) -> Daemon:
    """``agentkeep --home HOME --json serve --port PORT`` with the local models above."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "providers.toml").write_text(PROVIDERS)
    process = subprocess.Popen(
        [
            *AGENTKEEP,
            "--home",
            str(home),
            "--json",
            "--log-level",
            "error",
            "serve",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""},
    )
    try:
        listening = json.loads(first_line(process))
        token = (home / "daemon.token").read_text().strip()
    except BaseException:
        process.kill()
        process.communicate()
        raise
    api = httpx.Client(
        base_url=listening["url"],
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT,
    )
    return Daemon(process=process, url=listening["url"], signin=listening["console"], api=api)


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go ($AGENTKEEP_CONSOLE_SCREENSHOTS, else the test's tmp dir)."""
    folder = Path(os.environ.get("AGENTKEEP_CONSOLE_SCREENSHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    """Headless Debian Chromium with a fresh profile."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/browser-deps (as root) first")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=list(FLAGS),
            viewport={"width": 1100, "height": 720},
        )
        context.set_default_timeout(TIMEOUT * 1000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    """A page that fails the test on any uncaught script error."""
    errors: list[str] = []
    opened = browser.new_page()
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    assert errors == []
