"""schemathesis against ``/v1/openapi.json`` (issue 15): for every documented operation,
generated valid and invalid requests over real sockets; no response is a 5xx, and every
response matches the document (status, content type, body schema); invalid data is refused.

``AGENTKEEP_SCHEMATHESIS_EXAMPLES`` sets the examples per operation and mode (default 12;
e.g. 500 for a long run). The SSE stream is left out: it never ends by itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from .conftest import AUTH, Served, serve

EXAMPLES = int(os.environ.get("AGENTKEEP_SCHEMATHESIS_EXAMPLES", "12"))
CHECKS: dict[GenerationMode, list[Any]] = {
    GenerationMode.POSITIVE: [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ],
    GenerationMode.NEGATIVE: [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
        negative_data_rejection,
    ],
}
SKIPPED = {"/v1/sessions/{id}/events/stream"}


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


def _operations(url: str) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{url}/v1/openapi.json", headers=AUTH, timeout=30)
    return [
        result.ok() for result in schema.get_all_operations() if result.ok().path not in SKIPPED
    ]


def _fuzz(operation: Any, mode: GenerationMode, url: str, ran: list[str]) -> None:
    """Send ``EXAMPLES`` generated requests to one operation, checking each response."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def exchange(case: Any) -> None:
        response = case.call(base_url=url, headers=AUTH, timeout=30)
        case.validate_response(response, checks=CHECKS[mode], headers=AUTH)
        ran.append(operation.label)

    try:
        exchange()
    except Unsatisfiable:  # nothing about this operation can be made invalid (/healthz)
        assert mode is GenerationMode.NEGATIVE, operation.label


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_and_responses_match_the_document(
    fuzzed: Served, mode: GenerationMode
) -> None:
    operations = _operations(fuzzed.url)
    assert len(operations) >= 13
    ran: list[str] = []
    for operation in operations:
        _fuzz(operation, mode, fuzzed.url, ran)
    # Every operation was exercised (negative mode may find no invalid input for a few).
    assert len(set(ran)) >= (len(operations) if mode is GenerationMode.POSITIVE else 8)
    print(f"schemathesis {mode.value}: {len(ran)} requests over {len(set(ran))} operations")
