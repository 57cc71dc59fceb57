"""The session report (``agentkeep session export --html``) opened from disk in Debian's
headless Chromium with the network off: it renders from the file alone (no request leaves the
page), shows every message, tool call and result, each provider request's sent and received
sections, and renders hostile message text as text (no script from the content runs)."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Page, Request
from tests.unit.cli.test_session_export import ASK, HOSTILE, SESSION, make_session, run


def test_the_report_renders_offline_in_chromium(
    tmp_path: Path, page: Page, screenshots: Path
) -> None:
    home = tmp_path / "home"
    make_session(home)
    target = tmp_path / "report.html"
    run(home, "session", "export", SESSION, "--html", "-o", str(target))

    requested: list[str] = []
    dialogs: list[str] = []

    def seen(request: Request) -> None:
        requested.append(request.url)

    page.on("request", seen)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.context.set_offline(True)
    page.context.route(
        "**/*",
        lambda route: (
            route.abort() if not route.request.url.startswith("file:") else route.continue_()
        ),
    )
    page.goto(target.as_uri())
    page.wait_for_selector("#report[data-loaded=true]", timeout=5000)

    assert requested == [target.as_uri()]  # the file itself, nothing else
    assert dialogs == []
    assert page.evaluate("window.__xss") is None

    turns = page.locator("section.turn[data-turn]:not([data-turn=''])")
    assert turns.count() == 2
    first, second = turns.nth(0), turns.nth(1)
    assert "Turn 1 · completed" in first.locator("h2").inner_text()
    conversation = first.locator(".conversation")
    assert conversation.locator(".msg-user .text").all_inner_texts() == [ASK]
    assert conversation.locator(".tool.call code").all_inner_texts() == ["calculator"]
    assert conversation.locator(".tool.result pre").all_inner_texts() == ["84"]
    assert conversation.locator(".msg-assistant .text").all_inner_texts() == ["12 * 7 = 84."]

    # The hostile message: its exact text in a text node, no element made from it.
    hostile = second.locator(".conversation .msg-user .text")
    assert hostile.all_inner_texts() == [HOSTILE]
    assert page.locator("#report script, #report img").count() == 0

    # Three provider requests: what each was sent and what came back, with tokens and stops.
    requests = page.locator("details.request")
    assert requests.count() == 3
    page.eval_on_selector_all("details.request", "els => els.forEach(e => { e.open = true; })")
    sent = [requests.nth(i).locator(".sent [data-seq]").count() for i in range(3)]
    assert sent == [1, 3, 5]  # ask; ask, call, result; ... and answer, hostile message
    assert requests.nth(0).locator(".received .tool.call code").inner_text() == "calculator"
    assert requests.nth(1).locator(".received .msg-assistant .text").inner_text() == "12 * 7 = 84."
    assert requests.nth(2).locator(".sent .msg-user .text").last.inner_text() == HOSTILE
    summaries = page.locator("details.request > summary").all_inner_texts()
    assert len(summaries) == 3
    assert "stop: tool_call" in summaries[0]
    assert all(" in · " in s and " out" in s for s in summaries)
    assert page.locator("table.summary td").nth(5).inner_text() == "3"  # requests

    shot = screenshots / "session-report.png"
    page.set_viewport_size({"width": 1100, "height": 1500})
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 0
    assert os.access(shot, os.R_OK)
