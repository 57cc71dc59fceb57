"""The guard's other refusals (docs/daemon.md):
Host (421), Origin (403), content type (415),
body size (413), no CORS; an unsafe bind and an unsafe token file are refused at start."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentkeep.server import (
    MAX_BODY_BYTES,
    DaemonConfigError,
    RunningServer,
    SecurityPolicy,
    ServeOptions,
    load_token,
)

from .conftest import Served


def _error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_a_foreign_host_header_is_misdirected(shared: Served) -> None:
    with shared.client() as client:
        _error(
            client.get("/v1/agents", headers={"Host": "evil.example"}), 421, "misdirected_request"
        )
        _error(
            client.get("/healthz", headers={"Host": "evil.example:80"}), 421, "misdirected_request"
        )
        other_port = f"127.0.0.1:{shared.server.port + 1}"
        _error(client.get("/healthz", headers={"Host": other_port}), 421, "misdirected_request")
        for host in (f"localhost:{shared.server.port}", "127.0.0.1", "localhost"):
            assert client.get("/v1/agents", headers={"Host": host}).status_code == 200, host


def test_a_foreign_origin_is_forbidden(shared: Served) -> None:
    with shared.client() as client:
        evil = client.get("/v1/agents", headers={"Origin": "http://evil.example"})
        _error(evil, 403, "forbidden_origin")
        null = client.get("/healthz", headers={"Origin": "null"})
        _error(null, 403, "forbidden_origin")
        same = client.get(
            "/v1/agents", headers={"Origin": f"http://localhost:{shared.server.port}"}
        )
        assert same.status_code == 200
        assert not [h for h in same.headers if h.lower().startswith("access-control-")]


def test_no_cors_headers_even_for_a_preflight(shared: Served) -> None:
    origin = f"http://127.0.0.1:{shared.server.port}"
    with shared.client() as client:
        response = client.options(
            "/v1/agents",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        )
    assert response.status_code == 405
    assert not [h for h in response.headers if h.lower().startswith("access-control-")]


def test_a_body_that_is_not_json_is_refused(shared: Served) -> None:
    with shared.client() as client:
        text = client.post(
            "/v1/agents", content=b'{"id": "x"}', headers={"Content-Type": "text/plain"}
        )
        _error(text, 415, "unsupported_media_type")
        form = client.post("/v1/sessions", data={"agentId": "x"})
        _error(form, 415, "unsupported_media_type")
        patch = client.patch("/v1/agents/x", content=b"{}")  # no content type at all
        _error(patch, 415, "unsupported_media_type")
        assert (
            client.post(
                "/v1/agents",
                content=b'{"id": "typed-json"}',
                headers={"Content-Type": "Application/JSON; charset=utf-8"},
            ).status_code
            == 201
        )


def test_a_body_over_512_kb_is_refused_with_or_without_a_length(shared: Served) -> None:
    big = b'{"id": "big", "description": "' + b"x" * MAX_BODY_BYTES + b'"}'
    with shared.client() as client:
        _error(
            client.post("/v1/agents", content=big, headers={"Content-Type": "application/json"}),
            413,
            "payload_too_large",
        )

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
            for start in range(0, len(big), 64 * 1024):
                yield big[start : start + 64 * 1024]

        chunked = client.post(
            "/v1/agents", content=chunks(), headers={"Content-Type": "application/json"}
        )
        _error(chunked, 413, "payload_too_large")
        assert client.get("/v1/agents/big").status_code == 404  # nothing was written


def test_malformed_json_is_a_400_and_a_wrong_shape_a_422(shared: Served) -> None:
    with shared.client() as client:
        _error(
            client.post(
                "/v1/agents", content=b"{nope", headers={"Content-Type": "application/json"}
            ),
            400,
            "malformed_json",
        )
        _error(
            client.post(
                "/v1/sessions", content=b"[1", headers={"Content-Type": "application/json"}
            ),
            400,
            "malformed_json",
        )
        shape = client.post("/v1/sessions", json={"agentId": 7})
        _error(shape, 422, "invalid_request")
        assert shape.json()["error"]["details"]["field"] == "agentId"
        unknown = client.post("/v1/sessions", json={"agentId": "a", "sessionID": "b"})
        _error(unknown, 422, "invalid_request")


def test_binding_a_non_loopback_address_without_a_token_is_refused(served: Served) -> None:
    with pytest.raises(DaemonConfigError, match="without a token"):
        RunningServer(served.system, ServeOptions(host="0.0.0.0", port=0, token=None))
    with pytest.raises(DaemonConfigError, match="without a token"):
        SecurityPolicy.for_bind("192.168.1.10", 4317, token=None)
    # With a token, or on loopback, it is allowed.
    wide = SecurityPolicy.for_bind("0.0.0.0", 4317, token="x" * 32, extra_hosts=["box:4317"])
    assert {"127.0.0.1:4317", "localhost:4317", "0.0.0.0:4317", "box:4317"} <= wide.allowed_hosts
    assert "evil.example:4317" not in wide.allowed_hosts
    SecurityPolicy.for_bind("::1", 4317, token=None)


def test_no_auth_on_loopback_lets_requests_through(tmp_path: Path) -> None:
    from .conftest import serve

    running = serve(tmp_path / "state", token=None)
    try:
        with running.client(auth=False) as client:
            assert client.get("/v1/agents").status_code == 200
            # The Host and Origin checks stay on without a token.
            assert client.get("/v1/agents", headers={"Host": "evil.example"}).status_code == 421
    finally:
        running.stop()


def test_the_token_file_is_generated_once_private_and_reused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = load_token(home, env={})
    path = home / "daemon.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert len(token) >= 40
    assert load_token(home, env={}) == token
    assert load_token(home, env={"AGENTKEEP_DAEMON_TOKEN": "e" * 20}) == "e" * 20


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s" * 40)
    os.chmod(path, 0o644)
    with pytest.raises(DaemonConfigError, match="chmod 600"):
        load_token(tmp_path, token_file=path, env={})
    os.chmod(path, 0o600)
    assert load_token(tmp_path, token_file=path, env={}) == "s" * 40
    path.write_text("short")
    with pytest.raises(DaemonConfigError, match="at least 16"):
        load_token(tmp_path, token_file=path, env={})


def test_a_port_in_use_is_a_clear_error(served: Served) -> None:
    with pytest.raises(DaemonConfigError, match=r"Cannot listen on 127\.0\.0\.1"):
        RunningServer(served.system, ServeOptions(port=served.server.port, token="t" * 32))
