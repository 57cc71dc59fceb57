"""schemathesis hooks for ``test_schemathesis.py`` (loaded by its runner through
``SCHEMATHESIS_HOOKS``; not a test module).

One hook, :func:`filter_failure`: a schema-valid request refused for what the system holds
rather than for its shape is not a failure of the document. No schema can state these, since
each names something registered at run time or the record's own identity:

- a definition's ``model.id`` naming a provider this system does not have, or a model it
  does not serve (checked when the definition is written);
- a PATCH whose body ``id`` is not the definition's (the path's) id, and an
  ``Idempotency-Key`` header that differs from the body's ``idempotencyKey`` (rules across
  two parameters);
- a session start or a message naming a definition, provider or model this system cannot
  run (its driver, tools, provider or model: checked at start, docs/sessions.md);
- an idempotency key an earlier generated request used for another input;
- an integer of a definition's caller-owned JSON (``metadata``, a driver's ``config``)
  beyond 64 bits: JSON Schema's ``integer`` is any integral number, ``1e30`` included, which
  the server accepts as the float it is, so no bound on ``integer`` can state "a JSON integer
  literal within 64 bits" (docs/registry.md states it).

Every other refusal of a schema-valid request (a 400, or a 422 for any other reason) still
fails the run.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

# Error codes that are about what the system has registered, on the operations that meet them.
_STATE_CODES = {
    "startSession": {
        "invalid_session_config",
        "unsupported_driver",
        "provider_unavailable",
        "model_not_served",
    },
    "sendMessage": {
        "idempotency_conflict",  # an earlier request used the key for another input
        "invalid_session_config",
        "unknown_provider",
        "provider_unavailable",
        "model_not_served",
    },
}
_MODEL_ID_REFUSALS = ("is not registered in this system", "does not serve model", "provider/model")


def _about_state(operation_id: str, error: dict[str, Any]) -> bool:
    code, message = error.get("code"), str(error.get("message", ""))
    field = (error.get("details") or {}).get("field")
    if code in _STATE_CODES.get(operation_id, ()):
        return True
    if operation_id == "sendMessage" and code == "invalid_config":
        return "is not registered" in message  # the message's provider
    if operation_id == "sendMessage" and field == "idempotencyKey":
        return "differ" in message  # the header and the body name two keys
    if operation_id in ("createAgent", "updateAgent") and code == "invalid_definition":
        if message.endswith("does not fit in 64 bits"):
            return True
        if field == "model.id" and any(text in message for text in _MODEL_ID_REFUSALS):
            return True
        return operation_id == "updateAgent" and field == "id" and "cannot change" in message
    return False


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a schema-valid request refused for the system's state."""
    if not isinstance(failure, RejectedPositiveData) or response.status_code != 422:
        return True
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return True
    operation_id = case.operation.definition.raw.get("operationId", "")
    return not _about_state(str(operation_id), error)
