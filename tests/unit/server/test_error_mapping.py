"""No 500 for a library error or a configuration problem.

* Every error class agentkeep defines (every subclass of ``AgentkeepError``, found by walking
  the package, so a new one is covered without touching this file) has a status in
  ``STATUS_OF_CODE`` that is not 500, and ``docs/daemon.md`` lists its code in that status's
  row.
* Every route that calls the system is driven, over a real socket, with each error raised by
  the service method it calls: the response is that documented status and the error's code.
* A definition whose provider lacks its API key is a 422 ``provider_unavailable`` at session
  start naming ``model.id`` and the variable; a message selecting it is a 422 too; a turn whose
  provider fails to build fails, saying so. An unregistered provider or driver is a 422.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentkeep as ak
from agentkeep.cli.provider_adapters import LazyProvider
from agentkeep.cli.providers_toml import ProviderEntry
from agentkeep.errors import AgentkeepError
from agentkeep.providers import Provider
from agentkeep.server import RunningServer, ServeOptions
from agentkeep.server.app import operations
from agentkeep.server.errors import STATUS_OF_CODE, status_of

from .conftest import AUTH, TIMEOUT, TOKEN, Served

DOCS = Path(__file__).resolve().parents[3] / "docs" / "daemon.md"
MISSING_KEY = "AGENTKEEP_TEST_KEY_THAT_IS_NEVER_SET"

# Requests that reach every route that calls the system: (method, the route's path, the
# request's path, its JSON body or None). A route added to the app and not here fails
# test_every_route_is_driven.
REQUESTS: list[tuple[str, str, str, Any]] = [
    ("GET", "/v1/agents", "/v1/agents", None),
    ("POST", "/v1/agents", "/v1/agents", {"id": "a1"}),
    ("GET", "/v1/agents/{id}", "/v1/agents/a1", None),
    ("PATCH", "/v1/agents/{id}", "/v1/agents/a1", {"name": "n"}),
    ("DELETE", "/v1/agents/{id}", "/v1/agents/a1", None),
    ("GET", "/v1/agents/{id}/revisions", "/v1/agents/a1/revisions", None),
    ("GET", "/v1/sessions", "/v1/sessions", None),
    ("POST", "/v1/sessions", "/v1/sessions", {"agentId": "a1", "sessionId": "s1"}),
    ("GET", "/v1/sessions/{id}", "/v1/sessions/s1", None),
    ("DELETE", "/v1/sessions/{id}", "/v1/sessions/s1", None),
    ("GET", "/v1/sessions/{id}/messages", "/v1/sessions/s1/messages", None),
    ("POST", "/v1/sessions/{id}/compact", "/v1/sessions/s1/compact", {}),
    ("POST", "/v1/sessions/{id}/compact", "/v1/sessions/s1/compact", {"wait": True}),
    ("POST", "/v1/sessions/{id}/messages", "/v1/sessions/s1/messages", {"message": "hi"}),
    (
        "POST",
        "/v1/sessions/{id}/messages",
        "/v1/sessions/s1/messages",
        {"message": "hi", "wait": False},
    ),
    ("GET", "/v1/sessions/{id}/turns", "/v1/sessions/s1/turns", None),
    ("GET", "/v1/sessions/{id}/turns/{turn_id}", "/v1/sessions/s1/turns/t1", None),
    ("POST", "/v1/sessions/{id}/cancel", "/v1/sessions/s1/cancel", {}),
    ("POST", "/v1/sessions/{id}/settle", "/v1/sessions/s1/settle", {}),
    ("GET", "/v1/sessions/{id}/events", "/v1/sessions/s1/events", None),
    ("GET", "/v1/sessions/{id}/events/stream", "/v1/sessions/s1/events/stream", None),
    (
        "GET",
        "/v1/sessions/{id}/events/stream",
        "/v1/sessions/s1/events/stream?turn_id=t1&until_turn_end=true",
        None,
    ),
    ("GET", "/metrics", "/metrics", None),
]
WITHOUT_SYSTEM = {"/healthz", "/v1/openapi.json", "/v1/console/links"}


def library_errors() -> list[type[AgentkeepError]]:
    """Every error class agentkeep defines, after importing every module of the package."""
    for module in pkgutil.walk_packages(ak.__path__, "agentkeep."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[AgentkeepError]] = []
    pending: list[type[AgentkeepError]] = [AgentkeepError]
    while pending:
        kind = pending.pop()
        if kind in found:
            continue
        pending.extend(kind.__subclasses__())
        if kind.__module__.split(".")[0] == "agentkeep":
            found.append(kind)
    return sorted(found, key=lambda k: (k.__module__, k.__qualname__))


def documented() -> dict[str, set[int]]:
    """docs/daemon.md's error table: each code and the statuses whose row lists it."""
    table: dict[str, set[int]] = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        row = re.fullmatch(r"\| (\d{3}) \| (.*?) \| .* \|", line)
        if row:
            for code in re.findall(r"`([a-z_]+)`", row[2]):
                table.setdefault(code, set()).add(int(row[1]))
    return table


_VALUES = (("int", 1), ("float", 1.0), ("bool", False), ("JSONObject", {}), ("dict", {}))


def instance(kind: type[AgentkeepError]) -> AgentkeepError:
    """An error of class ``kind``, made by its own constructor with plain arguments."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in list(inspect.signature(kind.__init__).parameters.values())[1:]:
        if parameter.default is not inspect.Parameter.empty or parameter.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            continue
        note = str(parameter.annotation)
        value: Any = "x"
        if any(word in note for word in ("Iterable", "list", "Sequence", "tuple")):
            value = []
        for word, made in _VALUES:
            if note.startswith(word) or f"[{word}" in note or note == word:
                value = made
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = value
        else:
            args.append(value)
    return kind(*args, **kwargs)


class Raising:
    """Stands in for the system: every method reached through it raises a fresh error."""

    def __init__(self, make: Callable[[], AgentkeepError]) -> None:
        self._make = make

    def __getattr__(self, name: str) -> Raising:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._make()


def test_every_library_error_has_a_documented_status_that_is_not_500() -> None:
    kinds = library_errors()
    assert len(kinds) >= 60, [k.__name__ for k in kinds]  # the walk found the package
    docs = documented()
    for kind in kinds:
        status = status_of(kind)
        assert kind.code in STATUS_OF_CODE, f"{kind.__qualname__} ({kind.code}) has no status"
        assert status is not None, kind
        assert status != 500, kind
        assert status in docs.get(kind.code, set()), (
            f"docs/daemon.md does not list `{kind.code}` ({kind.__qualname__}) as a {status}"
        )
    assert 500 not in {s for code in STATUS_OF_CODE for s in docs.get(code, set())}


def test_every_route_is_driven() -> None:
    served = {(op.method, op.path) for op in operations() if op.path not in WITHOUT_SYSTEM}
    assert {(method, route) for method, route, _, _ in REQUESTS} == served


def test_every_route_answers_every_library_error_with_its_documented_status(
    served: Served, client: httpx.Client
) -> None:
    context = served.server.context
    real = context.system
    kinds = library_errors()
    answered = 0
    try:
        for kind in kinds:
            example = instance(kind)
            assert isinstance(example, kind)
            context.system = Raising(lambda kind=kind: instance(kind))  # type: ignore[assignment]
            for method, _, path, body in REQUESTS:
                response = client.request(method, path, json=body)
                assert response.status_code != 500, (kind, method, path, response.text)
                assert response.status_code == status_of(kind), (kind, method, path)
                assert response.json()["error"]["code"] == example.code, (kind, path)
                answered += 1
    finally:
        context.system = real
    assert answered == len(kinds) * len(REQUESTS)
    assert client.get("/v1/sessions").status_code == 200  # the real system is back


# -- configuration problems, end to end --------------------------------------------------------
def _fails_to_build(provider_id: str, model: str | None) -> Provider:
    raise RuntimeError(f"no API key: ${MISSING_KEY} is unset")


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A daemon whose system has a working provider, a providers.toml vendor entry whose key
    is unset, and a provider whose factory fails (as a vendor without its key does)."""
    monkeypatch.delenv(MISSING_KEY, raising=False)
    model = ak.ScriptedModel()
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    entry = ProviderEntry(
        id="claude",
        kind="claude",
        class_name="anthropic",
        model="claude-sonnet-4-6",
        api_key_env=MISSING_KEY,
    )
    providers.add("claude", LazyProvider(entry), kind="claude")
    providers.add("flaky", _fails_to_build, kind="gym")
    system = ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1"
    )
    try:
        options = ServeOptions(port=0, token=TOKEN, heartbeat_seconds=0.2)
        server = RunningServer(system, options).start()
    except BaseException:
        system.close()
        raise
    running = Served(system=system, server=server, model=model)
    try:
        yield running
    finally:
        running.stop()


def test_a_provider_without_its_key_is_a_422_naming_it_never_a_500(configured: Served) -> None:
    with httpx.Client(base_url=configured.url, headers=AUTH, timeout=TIMEOUT) as client:
        definition = {"id": "vendor", "model": {"id": "claude/claude-sonnet-4-6"}}
        assert client.post("/v1/agents", json=definition).status_code == 201
        started = client.post("/v1/sessions", json={"agentId": "vendor"})
        error = started.json()["error"]
        assert (started.status_code, error["code"]) == (422, "provider_unavailable"), started.text
        assert error["details"] == {"field": "model.id", "provider_id": "claude"}
        assert MISSING_KEY in error["message"]
        assert client.get("/v1/sessions").json()["sessions"] == []  # nothing was written

        assert client.post("/v1/agents", json={"id": "plain"}).status_code == 201
        started = client.post("/v1/sessions", json={"agentId": "plain", "sessionId": "p1"})
        assert started.status_code == 201, started.text
        sent = client.post("/v1/sessions/p1/messages", json={"message": "hi", "provider": "claude"})
        error = sent.json()["error"]
        assert (sent.status_code, error["code"]) == (422, "provider_unavailable"), sent.text
        assert MISSING_KEY in error["message"]

        # An unregistered provider is refused when the definition is written.
        created = client.post("/v1/agents", json={"id": "nowhere", "model": {"id": "nope/m-1"}})
        error = created.json()["error"]
        assert (created.status_code, error["code"]) == (422, "invalid_definition"), created.text
        assert error["details"]["field"] == "model.id"
        body = {"id": "driven", "driver": {"id": "no-driver"}}
        assert client.post("/v1/agents", json=body).status_code == 201
        started = client.post("/v1/sessions", json={"agentId": body["id"]})
        error = started.json()["error"]
        assert (started.status_code, error["code"]) == (422, "unsupported_driver"), started.text
        assert error["details"]["field"] == "driver.id"


def test_a_turn_whose_provider_cannot_be_built_fails_saying_so(configured: Served) -> None:
    with httpx.Client(base_url=configured.url, headers=AUTH, timeout=TIMEOUT) as client:
        definition = {"id": "flaky", "model": {"id": "flaky/any-model"}}
        assert client.post("/v1/agents", json=definition).status_code == 201
        started = client.post("/v1/sessions", json={"agentId": "flaky", "sessionId": "f1"})
        assert started.status_code == 201, started.text  # it declares no models: not built yet
        sent = client.post("/v1/sessions/f1/messages", json={"message": "hi"})
        assert sent.status_code == 200, sent.text
        turn = sent.json()["turn"]
        assert turn["status"] == "failed", turn
        assert 'Provider "flaky" cannot be used' in turn["error"]["message"], turn
        assert MISSING_KEY in turn["error"]["message"]
