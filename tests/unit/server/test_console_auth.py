"""The console's sign-in over real sockets: a one-time link becomes an HttpOnly,
SameSite=Strict session cookie, which the API accepts instead of the token only on a
same-origin request (no cross-site fetch, the console's header on unsafe methods), with the
Host/Origin guard unchanged; the console's files come from the package with a strict CSP; and
the two API routes the console added (revision history, a fresh sign-in link)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import httpx
import pytest
from tests.unit.server.conftest import TOKEN, Served, serve

from agentkeep.server.console_auth import (
    COOKIE_NAME,
    CSRF_HEADER,
    SESSION_SECONDS,
    ConsoleSessions,
)

ORIGIN_HEADER = "Origin"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    running = serve(tmp_path / "state")
    try:
        yield running
    finally:
        running.stop()


def _sign_in(daemon: Served, client: httpx.Client) -> str:
    """Sign ``client`` (no token) in through a fresh one-time link; its credential."""
    link = daemon.server.signin_url()
    answer = client.get(link.removeprefix(daemon.url))
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/"
    credential: str = client.cookies[COOKIE_NAME]
    return credential


def test_a_one_time_link_sets_a_strict_httponly_cookie_and_redirects_to_a_clean_url(
    daemon: Served,
) -> None:
    link = daemon.server.signin_url()
    assert link.startswith(f"{daemon.url}/console/signin?code=")
    with daemon.client(auth=False) as client:
        answer = client.get(link.removeprefix(daemon.url))
        assert answer.status_code == 303
        assert answer.headers["location"] == "/"
        parts = [p.strip().lower() for p in answer.headers["set-cookie"].split(";")]
        assert parts[0].startswith(f"{COOKIE_NAME}=")
        assert {"httponly", "samesite=strict", "path=/"} <= set(parts)
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert client.get("/v1/agents").status_code == 200  # the cookie alone, same origin
        # single use: the same link again is refused, and signs nobody in
        with daemon.client(auth=False) as other:
            again = other.get(link.removeprefix(daemon.url))
            assert again.status_code == 403
            assert COOKIE_NAME not in again.headers.get("set-cookie", "")
            assert other.get("/v1/agents").status_code == 401


def test_codes_expire_and_credentials_outlive_a_restart_but_not_the_token() -> None:
    now = [1_000_000.0]
    console = ConsoleSessions(TOKEN, clock=lambda: now[0])
    code = console.issue(ttl_seconds=60)
    now[0] += 61
    assert console.redeem(code) is None  # expired
    assert console.redeem("not-a-code") is None
    credential = console.redeem(console.issue(ttl_seconds=60))
    assert credential is not None
    assert console.valid(credential)
    # A restarted daemon (same token) honours it; another token does not.
    assert ConsoleSessions(TOKEN, clock=lambda: now[0]).valid(credential)
    assert not ConsoleSessions(TOKEN + "x", clock=lambda: now[0]).valid(credential)
    expires, nonce, mac = credential.split(".")
    forged = [f"{int(expires) + 999}.{nonce}.{mac}", f"{expires}.{nonce}x.{mac}", "a.b.c", ""]
    assert not any(console.valid(f) for f in forged)
    console.revoke(credential)
    assert not console.valid(credential)
    later = ConsoleSessions(TOKEN, clock=lambda: now[0] + SESSION_SECONDS + 1)
    other = console.redeem(console.issue())
    assert other is not None
    assert not later.valid(other)  # expired


def test_the_cookie_is_refused_cross_site_and_on_unsafe_methods_without_the_header(
    daemon: Served,
) -> None:
    with daemon.client(auth=False) as client:
        _sign_in(daemon, client)
        body = {"id": "helper"}
        # A cross-site request (a browser says so) never gets to use the cookie.
        for site in ("cross-site", "same-site"):
            assert client.get("/v1/agents", headers={"Sec-Fetch-Site": site}).status_code == 401
        # An unsafe method needs the console's header (a form post cannot send it).
        assert client.post("/v1/agents", json=body).status_code == 401
        refused = client.post(
            "/v1/agents", json=body, headers={CSRF_HEADER: "1", "Sec-Fetch-Site": "cross-site"}
        )
        assert refused.status_code == 401
        # A foreign Origin is refused by the guard before any credential is looked at.
        foreign = client.post(
            "/v1/agents",
            json=body,
            headers={CSRF_HEADER: "1", ORIGIN_HEADER: "http://evil.example"},
        )
        assert foreign.status_code == 403
        created = client.post(
            "/v1/agents",
            json=body,
            headers={CSRF_HEADER: "1", "Sec-Fetch-Site": "same-origin", ORIGIN_HEADER: daemon.url},
        )
        assert created.status_code == 201, created.text
        # The Host guard holds for cookie requests too.
        assert client.get("/v1/agents", headers={"Host": "evil.example"}).status_code == 421
        # Sign-out needs the header, then the cookie is worthless.
        assert client.post("/console/signout").status_code == 403
        assert client.post("/console/signout", headers={CSRF_HEADER: "1"}).status_code == 204
        with daemon.client(auth=False) as stale:
            credential = _sign_in(daemon, stale)
            assert stale.get("/v1/agents").status_code == 200
            stale.post("/console/signout", headers={CSRF_HEADER: "1"})
            stale.cookies.set(COOKIE_NAME, credential)
            assert stale.get("/v1/agents").status_code == 401


def test_a_forged_cookie_is_refused(daemon: Served) -> None:
    with daemon.client(auth=False) as client:
        client.cookies.set(COOKIE_NAME, "forged-credential-0123456789")
        assert client.get("/v1/agents").status_code == 401


def test_the_console_is_served_from_the_package_with_a_strict_policy(daemon: Served) -> None:
    with daemon.client(auth=False) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert "unsafe-eval" not in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert '<script type="module" src="/console/static/app.js">' in page.text
        for name in ("app.js", "api.js", "dom.js", "ledger.js", "session.js", "console.css"):
            found = client.get(f"/console/static/{name}")
            assert found.status_code == 200, name
        script = client.get("/console/static/app.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert client.get("/console/static/..%2f__init__.py").status_code == 404
        assert client.get("/console/static/nope.js").status_code == 404
        # No JavaScript builds HTML from strings: every text goes through Text nodes.
        folder = resources.files("agentkeep.server") / "console"
        scripts = [entry.name for entry in folder.iterdir() if entry.name.endswith(".js")]
        assert len(scripts) >= 8
        for name in scripts:
            source = client.get(f"/console/static/{name}").text
            assert "innerHTML" not in source, name
            assert "insertAdjacentHTML" not in source, name


def test_revision_history_and_a_fresh_link_through_the_api(daemon: Served) -> None:
    with daemon.client() as client:
        client.post("/v1/agents", json={"id": "helper", "instructions": "one"})
        client.patch("/v1/agents/helper", json={"instructions": "two"})
        page = client.get("/v1/agents/helper/revisions").json()
        assert [r["number"] for r in page["revisions"]] == [1, 2]
        assert [r["definition"]["instructions"] for r in page["revisions"]] == ["one", "two"]
        assert page["nextAfter"] is None
        assert (
            client.get("/v1/agents/helper/revisions?after=1").json()["revisions"][0]["number"] == 2
        )
        assert client.get("/v1/agents/nobody/revisions").status_code == 404
        made = client.post("/v1/console/links")
        assert made.status_code == 201
        path = made.json()["path"]
    with daemon.client(auth=False) as anonymous:
        assert anonymous.post("/v1/console/links").status_code == 401
        assert anonymous.get(path).status_code == 303
        assert anonymous.get("/v1/agents").status_code == 200
