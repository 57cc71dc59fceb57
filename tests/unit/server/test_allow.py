"""A 405 names the methods the path serves in its ``Allow`` header (RFC 9110 §15.5.6), for
every route of the app, over real sockets."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from agentkeep.server.app import operations

_METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")


def _served_methods() -> dict[str, set[str]]:
    by_path: dict[str, set[str]] = defaultdict(set)
    for op in operations():
        by_path[op.path].add(op.method)
    return by_path


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


def test_every_405_names_all_the_methods_of_its_path(shared: Any) -> None:
    checked = 0
    with shared.client() as client:
        for path, methods in _served_methods().items():
            allowed = methods | ({"HEAD"} if "GET" in methods else set())
            for method in _METHODS:
                if method in methods:
                    continue
                response = client.request(method, _concrete(path))
                assert response.status_code == 405, (method, path, response.status_code)
                header = {m.strip() for m in response.headers["allow"].split(",")}
                assert header == allowed, (method, path)
                assert response.json()["error"]["code"] == "method_not_allowed"
                checked += 1
    assert checked > 20


def test_head_still_answers_a_get_route(shared: Any) -> None:
    with shared.client() as client:
        assert client.head("/v1/agents").status_code == 200
        assert client.get("/v1/agents").status_code == 200
