"""The console in a real headless Chromium over a real ``agentkeep serve``: sign in through
the one-time link the daemon printed, create and edit a definition (its revision history
shows what changed), start a session, send, watch the answer stream in, check the page
against the ledger read through the API (every event rendered once, in order), reload in the
middle of a slow turn and lose nothing, cancel it, archive; and load a 10,000-event session."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page
from tests.unit.console.conftest import TIMEOUT, Daemon, start_daemon

import agentkeep as ak

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
_STREAM_WATCH = """() => {
  window.__streamed = [];
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) {
      if (n.nodeType === 1 && n.matches('.streaming')) window.__streamed.push(n);
    }
  }).observe(document.getElementById('log'), { childList: true });
}"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    running = start_daemon(tmp_path_factory.mktemp("console") / "home")
    try:
        yield running
    finally:
        running.stop()


def _sign_in(page: Page, daemon: Daemon) -> None:
    link = daemon.take_link()
    page.goto(link)
    assert page.url == daemon.url + "/"  # redirected: no code, no token in the address
    page.wait_for_selector("#view[data-loaded=true]")
    spent = page.goto(link)  # a link works once
    assert spent is not None
    assert spent.status == 403
    assert "cannot be used" in page.inner_text("h1")
    page.goto(daemon.url + "/")
    page.wait_for_selector("#view[data-loaded=true]")
    cookies = page.context.cookies()
    assert [(c["name"], c["httpOnly"], c["sameSite"], c["path"]) for c in cookies] == [
        ("agentkeep_console", True, "Strict", "/")
    ]
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it


def _seqs(page: Page) -> list[int]:
    found: list[int] = page.eval_on_selector_all(
        "#log [data-seq]", "els => els.map(e => Number(e.dataset.seq))"
    )
    return found


def _matches_ledger(page: Page, daemon: Daemon, session_id: str) -> list[dict[str, Any]]:
    """Wait until the page shows exactly the ledger's events (each once, in order)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        ledger = daemon.events(session_id)
        expected = [e["sequence"] for e in ledger]
        count = len(expected)
        page.wait_for_function(
            f"document.querySelectorAll('#log [data-seq]').length >= {count}", timeout=5000
        )
        shown = _seqs(page)
        if shown == expected:
            return ledger
        assert len(shown) == len(set(shown)), "an event rendered twice"
        assert time.monotonic() < deadline, (shown[-5:], expected[-5:])


def _create_definition(page: Page, daemon: Daemon, id: str, model: str) -> None:
    page.goto(daemon.url + "/#/definitions")
    page.wait_for_selector("#view[data-loaded=true]")
    page.fill("#create-definition input[name=id]", id)
    page.fill("#create-definition input[name=model]", model)
    page.fill("#create-definition textarea[name=instructions]", "Answer briefly.")
    page.click("#create-definition button[type=submit]")
    page.wait_for_selector("#edit-definition")


def test_sign_in_define_start_send_stream_and_archive(
    page: Page, daemon: Daemon, screenshots: Path
) -> None:
    page.goto(daemon.url + "/")  # not signed in yet: the page says how to
    page.wait_for_selector("#signin-needed")
    page.screenshot(path=str(screenshots / "signin.png"))
    _sign_in(page, daemon)
    _create_definition(page, daemon, "helper", "fast/gym-1")
    assert daemon.api.get("/v1/agents/helper").json()["currentRevision"] == 1
    # Edit: a new revision, and the history says what changed.
    page.fill("#edit-definition input[name=description]", "Answers questions")
    page.fill("#edit-definition textarea[name=instructions]", "Answer briefly. <b>Always.</b>")
    page.click("#edit-definition button[type=submit]")
    page.wait_for_selector("#revisions li[data-number='2']")
    assert daemon.api.get("/v1/agents/helper").json()["currentRevision"] == 2
    changes = page.inner_text("#revisions li[data-number='2'] .changes")
    assert "instructions" in changes
    assert "<b>Always.</b>" in changes
    assert "description" in changes
    page.screenshot(path=str(screenshots / "definition.png"))
    page.goto(daemon.url + "/#/definitions")
    page.wait_for_selector("#definitions tr[data-id=helper]")
    page.screenshot(path=str(screenshots / "definitions.png"))

    # Start a session from the definition, send, watch the answer stream in.
    page.goto(daemon.url + "/#/definitions/helper")
    page.click("#start-session")
    page.wait_for_selector("#view[data-loaded=true][data-live=open]")
    session_id = page.url.rsplit("/", 1)[1]
    assert daemon.api.get(f"/v1/sessions/{session_id}").json()["agentId"] == "helper"
    page.evaluate(_STREAM_WATCH)
    page.fill("#message", XSS)
    page.click("#send")
    page.wait_for_selector("#log [data-type='turn.completed']")
    streamed = page.evaluate("window.__streamed.map(n => n.textContent)")
    assert streamed
    assert "answer-" in streamed[0]
    assert page.locator("#log .streaming").count() == 0  # replaced by the durable message
    ledger = _matches_ledger(page, daemon, session_id)
    types = [e["type"] for e in ledger]
    assert {"message", "assistant.block", "tool.result", "turn.completed"} <= set(types)
    user = page.locator("#log .msg-user .text").first
    assert user.inner_text() == XSS  # the payload is text, not markup
    assert page.evaluate("window.__xss") is None
    answer = [e for e in ledger if e["type"] == "message" and e["data"]["role"] == "assistant"]
    shown = page.locator("#log .msg-assistant:not(.streaming) .text").last.inner_text()
    assert shown == answer[-1]["data"]["message"]["parts"][0]["text"]
    call = next(e for e in ledger if e["type"] == "assistant.block")["data"]["block"]
    assert page.locator("#log .tool.call code").first.inner_text() == call["name"]
    page.screenshot(path=str(screenshots / "session.png"))

    # Sessions list, filtered by definition and status.
    page.goto(daemon.url + "/#/sessions?agent=helper&status=active")
    page.wait_for_selector(f"#sessions tr[data-id='{session_id}']")
    page.screenshot(path=str(screenshots / "sessions.png"))

    # Archive: the page says so, the API agrees, the filters follow.
    page.goto(daemon.url + f"/#/sessions/{session_id}")
    page.wait_for_selector("#view[data-loaded=true]")
    page.click("#archive")
    page.wait_for_selector("#session-status.archived")
    assert daemon.api.get(f"/v1/sessions/{session_id}").json()["status"] == "archived"
    assert page.is_disabled("#send")
    page.goto(daemon.url + "/#/sessions?status=active")
    page.wait_for_selector("#view[data-loaded=true]")
    assert page.locator(f"#sessions tr[data-id='{session_id}']").count() == 0
    page.select_option("#filter-status", "archived")
    page.wait_for_selector(f"#sessions tr[data-id='{session_id}']")


def test_reload_mid_turn_loses_nothing_and_cancel_ends_the_turn(
    page: Page, daemon: Daemon, screenshots: Path
) -> None:
    _sign_in(page, daemon)
    _create_definition(page, daemon, "slowpoke", "slow/gym-1")
    page.click("#start-session")
    page.wait_for_selector("#view[data-loaded=true][data-live=open]")
    session_id = page.url.rsplit("/", 1)[1]
    page.fill("#message", "take your time")
    page.click("#send")
    page.wait_for_selector("#turn-status.running")
    page.wait_for_selector("#log [data-type='turn.running']")
    # Reload in the middle of the turn: the page rebuilds from the ledger and follows on.
    page.reload()
    page.wait_for_selector("#view[data-loaded=true][data-live=open]")
    page.wait_for_selector("#turn-status.running")
    before = _matches_ledger(page, daemon, session_id)
    assert not any(
        e["type"].startswith("turn.") and e["type"] != "turn.queued" and e["type"] != "turn.running"
        for e in before
    )
    page.wait_for_selector("#log .streaming")  # deltas keep coming after the reload
    page.screenshot(path=str(screenshots / "session-streaming.png"))
    page.click("#cancel")
    page.wait_for_selector("#log [data-type='turn.cancelled']")
    page.wait_for_selector("#turn-status.idle")
    assert page.is_disabled("#cancel")
    ledger = _matches_ledger(page, daemon, session_id)
    turns = daemon.api.get(f"/v1/sessions/{session_id}/turns").json()
    assert [t["status"] for t in turns["turns"]] == ["cancelled"]
    assert [e["sequence"] for e in ledger] == list(range(1, len(ledger) + 1))


class _EvilPage(BaseHTTPRequestHandler):
    """A page of another origin (same host, another port: same-site, so a browser sends
    even a SameSite=Strict cookie along) that tries to use the console's cookie."""

    target = ""

    def do_GET(self) -> None:
        body = f"""<!doctype html><form id="f" method="post" enctype="text/plain"
          action="{self.target}/v1/agents"><input name='{{"id":"evil-form","x":"' value='"}}'>
          </form>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_page_of_another_origin_cannot_use_the_cookie(page: Page, daemon: Daemon) -> None:
    _sign_in(page, daemon)
    _EvilPage.target = daemon.url
    evil = ThreadingHTTPServer(("127.0.0.1", 0), _EvilPage)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        statuses = page.evaluate(
            """async (target) => {
              const tries = [
                fetch(target + '/v1/agents', {method: 'POST', mode: 'no-cors',
                  credentials: 'include', headers: {'content-type': 'text/plain'},
                  body: JSON.stringify({id: 'evil-fetch'})}),
                fetch(target + '/v1/agents', {method: 'POST', credentials: 'include',
                  headers: {'content-type': 'application/json', 'x-agentkeep-console': '1'},
                  body: JSON.stringify({id: 'evil-cors'})}),
              ];
              return Promise.all(tries.map((t) => t.then((r) => r.type, (e) => 'blocked')));
            }""",
            daemon.url,
        )
        assert statuses == ["opaque", "blocked"]  # no readable answer, the preflight failed
        with page.expect_navigation():
            page.evaluate("document.getElementById('f').submit()")
        assert page.locator("body").inner_text().find("forbidden_origin") >= 0
    finally:
        evil.shutdown()
        evil.server_close()
        thread.join(TIMEOUT)
    ids = [a["id"] for a in daemon.api.get("/v1/agents").json()["agents"]]
    assert not [i for i in ids if i.startswith("evil")]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_daemon_restart_mid_turn_resumes_the_stream_with_nothing_lost(
    page: Page, tmp_path: Path
) -> None:
    """SIGTERM the daemon while a turn streams, start it again on the same port: the open
    page keeps its cookie (signed with the token, which the restart keeps), reconnects from
    the last sequence it rendered, and shows the turn's end with every event once."""
    home = tmp_path / "home"
    port = _free_port()
    running = start_daemon(home, port)
    streams: list[dict[str, str]] = []
    page.on(
        "request",
        lambda request: (
            streams.append({"url": request.url, **request.headers})
            if "/events/stream" in request.url
            else None
        ),
    )
    try:
        _sign_in(page, running)
        _create_definition(page, running, "restarted", "slow/gym-1")
        page.click("#start-session")
        page.wait_for_selector("#view[data-loaded=true][data-live=open]")
        session_id = page.url.rsplit("/", 1)[1]
        page.fill("#message", "survive a restart")
        page.click("#send")
        page.wait_for_selector("#log [data-type='turn.running']")
        running.stop()
        page.wait_for_selector("#view[data-live=reconnecting]")
        shown_before = _seqs(page)
        running = start_daemon(home, port)
        page.wait_for_selector("#log [data-type='turn.completed']", timeout=60_000)
        ledger = _matches_ledger(page, running, session_id)
        duplicates = page.get_attribute("#view", "data-duplicates")
    finally:
        running.stop()
    assert shown_before == [e["sequence"] for e in ledger][: len(shown_before)]
    resumed = streams[1:]
    assert resumed, "the page never reconnected"
    # The browser's own reconnect (same URL, after=0) sent Last-Event-ID: the new daemon
    # resumed after it, so the page received no event it had already rendered (had the
    # header been lost, the whole backlog would have come again).
    assert all("after=0" in request["url"] for request in resumed)
    assert duplicates is None


def test_a_session_of_ten_thousand_events_loads(
    page: Page, tmp_path: Path, screenshots: Path
) -> None:
    home = tmp_path / "big"
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel(), kind="gym")
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        agent = system.create(id="big")
        with ThreadPoolExecutor(16) as pool:
            note = "a note that is long enough to look like a real metadata value " * 2
            list(
                pool.map(
                    lambda n: system.update_metadata(agent.id, {"n": n, "note": note}),
                    range(10_000),
                )
            )
    running = start_daemon(home)
    try:
        _sign_in(page, running)
        started = time.monotonic()
        page.goto(running.url + "/#/sessions/big")
        page.wait_for_selector("#view[data-loaded=true]", timeout=120_000)
        wall = time.monotonic() - started
        load_ms = int(page.get_attribute("#view", "data-load-ms") or "0")
        shown = _seqs(page)
        assert shown == list(range(1, 10_001))
        page.screenshot(path=str(screenshots / "session-10000.png"))
    finally:
        running.stop()
    print(f"\n10,000 events: page load {wall:.2f} s (the page's own measure {load_ms} ms)")
    assert wall < 30.0
