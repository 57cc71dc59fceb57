"""An injected driver resolves its revision's ``authRef`` through the system's credential
resolver (``context.credential()``), as the native loop does for its requests, and reads its
``driver.config`` from the revision it is handed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from tests.unit.drivers.conftest import DriverWorld, Scripted, types_of
from tests.unit.drivers.process_helpers import PYTHON, linux_only

import agentkeep as ak
from agentkeep.drivers import DriverContext, DriverResult, DriverRunRequest, ProcessDriver

SECRET = "remote-secret-4242"


def _definition(auth_ref: str | None) -> dict[str, Any]:
    return {
        "id": "remote",
        "driver": {"id": "remote", "config": {"sandbox": "workspace-write"}},
        "authRef": auth_ref,
    }


def test_a_driver_gets_its_credential_and_config(world: DriverWorld) -> None:
    seen: list[tuple[str | None, str | None, Any]] = []

    def run(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        credential = context.credential()
        seen.append(
            (
                None if credential is None else credential.ref,
                None if credential is None else credential.secret,
                request.revision.definition.driver.config,
            )
        )
        return DriverResult(
            message={"role": "assistant", "parts": [{"type": "text", "text": "ok"}]}
        )

    system = world.open([Scripted("remote", run)], credentials={"team-key": SECRET}.get)
    system.registry.create(_definition("team-key"))
    session = system.sessions.start("remote")

    done = system.sessions.send(session.id, "go").wait(timeout_seconds=10)

    assert done.status == "completed"
    assert seen == [("team-key", SECRET, {"sandbox": "workspace-write"})]
    assert all(SECRET not in repr(event) for event in system.events(session.id, limit=1000))


def test_without_an_auth_ref_there_is_no_credential(world: DriverWorld) -> None:
    seen: list[object] = []

    def run(request: DriverRunRequest, context: DriverContext) -> None:
        seen.append(context.credential())

    system = world.open([Scripted("remote", run)])
    system.registry.create(_definition(None))
    session = system.sessions.start("remote")
    assert system.sessions.send(session.id, "go").wait(timeout_seconds=10).status == "completed"
    assert seen == [None]


def test_an_unresolvable_auth_ref_fails_the_driver_turn_naming_it(world: DriverWorld) -> None:
    def run(request: DriverRunRequest, context: DriverContext) -> None:
        context.credential()

    system = world.open([Scripted("remote", run)], credentials=lambda ref: None)
    system.registry.create(_definition("missing-key"))
    session = system.sessions.start("remote")

    done = system.sessions.send(session.id, "go").wait(timeout_seconds=10)

    assert done.status == "failed"
    assert done.error is not None
    assert 'authRef "missing-key" could not be resolved' in done.error.message
    assert types_of(system, session.id)[-1] == "turn.failed"
    assert isinstance(ak.CredentialUnavailableError("x", "y"), ak.AgentkeepError)


_HARNESS = """
import hashlib, json, os, sys
request = json.load(sys.stdin)
secret = os.environ.get("AGENTKEEP_CREDENTIAL")
digest = None if secret is None else hashlib.sha256(secret.encode()).hexdigest()
stdin_had_it = secret is not None and secret in json.dumps(request)
sys.stdout.write(json.dumps({"type": "result", "metadata": {
    "digest": digest, "authRef": request["revision"]["definition"]["authRef"],
    "stdinHadIt": stdin_had_it}}) + "\\n")
"""


@linux_only
def test_the_process_driver_hands_the_secret_to_its_harness_in_the_environment_only(
    world: DriverWorld, tmp_path: Path
) -> None:
    script = tmp_path / "harness.py"
    script.write_text(_HARNESS)
    driver = ProcessDriver("remote", command=[PYTHON, str(script)])
    system = world.open([driver], credentials={"team-key": SECRET}.get)
    system.registry.create(_definition("team-key"))
    session = system.sessions.start("remote")

    done = system.sessions.send(session.id, "go").wait(timeout_seconds=30)

    assert done.status == "completed", done.error
    assert done.result is not None
    assert done.result["metadata"] == {
        "digest": hashlib.sha256(SECRET.encode()).hexdigest(),
        "authRef": "team-key",
        "stdinHadIt": False,
    }
    assert all(SECRET not in repr(event) for event in system.events(session.id, limit=1000))


@linux_only
def test_the_process_driver_starts_no_harness_for_an_unresolvable_auth_ref(
    world: DriverWorld, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    script = tmp_path / "harness.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    driver = ProcessDriver("remote", command=[PYTHON, str(script)])
    system = world.open([driver])  # no resolver
    system.registry.create(_definition("team-key"))
    session = system.sessions.start("remote")

    done = system.sessions.send(session.id, "go").wait(timeout_seconds=30)

    assert done.status == "failed"
    assert done.error is not None
    assert 'authRef "team-key" could not be resolved' in done.error.message
    assert not marker.exists()
