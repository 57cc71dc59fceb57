"""schemathesis against ``/v1/openapi.json``: the document is as strict as
the server, over real sockets.

schemathesis's own runner (its CLI, as a subprocess) runs three phases against the daemon:
the document's examples, *coverage* (for every operation, the boundary values of each
constraint the document states, and each way to break it: a missing required field, an
unknown one, a string one character too long, a value off its pattern, a query parameter of
the wrong type) and *fuzzing* (generated valid and invalid requests). Every response must:

- not be a 5xx (``not_a_server_error``);
- match the document: a documented status (``status_code_conformance``), content type
  (``content_type_conformance``) and body (``response_schema_conformance``);
- refuse what the document says is invalid (``negative_data_rejection``: a 4xx) and accept
  what it says is valid (``positive_data_acceptance``), unless the refusal is about state:
  404, 409 or 410 (a record deleted by an earlier generated request), or a 422 naming
  something the system has not registered (``schemathesis_hooks.py`` says which) — never a
  400, nor a 422 about the request's shape;
- answer a missing required header or an undocumented method as documented
  (``missing_required_header``, ``unsupported_method``).

Deterministic (``--generation-deterministic``: no random seed, no example database; one
worker) and bounded: ``AGENTKEEP_SCHEMATHESIS_EXAMPLES`` sets the fuzzing examples per
operation (default 15; e.g. 500 for a long run). The SSE stream is left out: it never ends.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import TOKEN, Served, serve

EXAMPLES = int(os.environ.get("AGENTKEEP_SCHEMATHESIS_EXAMPLES", "15"))
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
)
# A valid request may still find its record gone (404, 410) or busy (409): state, not shape.
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "410"]
"""
SKIPPED = "/v1/sessions/{id}/events/stream"
SCHEMATHESIS = (sys.executable, "-m", "schemathesis.cli")  # this interpreter's install
HERE = Path(__file__).resolve().parent  # schemathesis_hooks.py


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    running = serve(tmp_path_factory.mktemp("fuzz") / "state")
    try:
        # Some real ids, so generated requests can also reach existing records.
        with running.client() as client:
            client.post("/v1/agents", json={"id": "fuzz"}).raise_for_status()
            client.post("/v1/sessions", json={"agentId": "fuzz", "sessionId": "fuzz"})
        yield running
    finally:
        running.stop()


def test_the_document_is_as_strict_as_the_server(fuzzed: Served, tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        *SCHEMATHESIS,
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{fuzzed.url}/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--phases",
        "examples,coverage,fuzzing",
        "--checks",
        ",".join(CHECKS),
        "--exclude-path",
        SKIPPED,
        "--max-examples",
        str(EXAMPLES),
        "--generation-deterministic",
        "--workers",
        "1",
        "--continue-on-failure",
        "--request-timeout",
        "30",
    ]
    environment = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks"}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    ran = subprocess.run(
        command,
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output
    tested = re.search(r"Tested: (\d+)", output)
    assert tested is not None, output
    assert int(tested[1]) >= 17, output  # every operation but the stream
    cases = re.search(r"(\d+) generated", output)
    assert cases is not None, output
    assert int(cases[1]) >= 500, output
    print(output[-600:])
