"""The :class:`~agentkeep.mcp.backend.Backend` over a daemon's REST API (``docs/daemon.md``).

Every method is one request (``update_definition``: two; ``wait_turn``: a bounded poll), and
returns the library's records decoded from the wire (:mod:`agentkeep.client.records`), so
the commands and tools above it cannot tell which transport they run on. A refusal is raised
as the library error of the envelope's ``code``; a daemon that cannot be reached is a
:class:`DaemonUnreachableError`.
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Generator, Iterator
from typing import Any

import httpx
import msgspec

from agentkeep.agent_system.compaction import Compaction
from agentkeep.client.records import (
    DaemonError,
    definition_record,
    library_error,
    session_event,
    session_record,
    turn_record,
)
from agentkeep.client.sse import IdleBound, IdlePassedError, parse_sse, sse_lines
from agentkeep.delivery import DeliveryKind
from agentkeep.errors import AgentExistsError, AgentkeepError, InvalidMessageError
from agentkeep.mcp.backend import Backend
from agentkeep.mcp.types import AgentMessage
from agentkeep.registry import DefinitionRecord, DefinitionUpdate, Revision
from agentkeep.sessions import SessionRecord
from agentkeep.types import JSONObject, MessageOptions, SessionEvent
from agentkeep.types.turns import SentTurn, TurnRecord

# How often wait_turn asks whether a turn is terminal: short next to any model call.
POLL_SECONDS = 0.1


class DaemonUnreachableError(AgentkeepError):
    """The daemon named by ``daemon.json`` did not answer (it may be stopping)."""

    code = "daemon_unreachable"


class HttpBackend(Backend):
    """:class:`~agentkeep.mcp.backend.Backend` over the daemon at ``url``.

    Args:
        url: The daemon's base URL (``daemon.json``'s ``url``).
        token: The bearer token, or None for a ``--no-auth`` daemon.
        timeout_seconds: The bound on one request (a cancel waits for the turn to stop).
    """

    def __init__(self, url: str, token: str | None, *, timeout_seconds: float = 60.0) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url
        self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout_seconds)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # -- transport ---------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        return self._exchange(method, path, body=body, params=params)[1]

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """One request: its status and decoded body (a refusal raised as its error)."""
        query = {k: _query(v) for k, v in (params or {}).items() if v is not None}
        try:
            content = None if body is None else msgspec.json.encode(body)
        except UnicodeEncodeError as error:
            # Only text can travel (a lone surrogate from undecodable input is not text);
            # the library refuses it in its own words directly, this is the same exit code.
            raise DaemonError(
                422,
                "invalid_request",
                f"The request holds text that is not valid UTF-8 ({error.reason}); nothing "
                "was sent.",
                {},
            ) from None
        try:
            if content is None:
                response = self._http.request(method, path, params=query)
            else:
                response = self._http.request(
                    method,
                    path,
                    params=query,
                    content=content,
                    headers={"content-type": "application/json"},
                )
        except httpx.TransportError as error:
            raise DaemonUnreachableError(
                f"The daemon at {self.url} did not answer ({type(error).__name__}): it may be "
                "stopping; run the command again."
            ) from error
        try:
            value = response.json()
        except ValueError:
            value = None
        if response.status_code >= 400:
            raise library_error(response.status_code, value)
        return response.status_code, value

    # -- definitions -------------------------------------------------------------------------
    def list_definitions(
        self, *, include_deleted: bool, after: str | None, limit: int
    ) -> list[DefinitionRecord]:
        page = self._call(
            "GET",
            "/v1/agents",
            params={"include_deleted": include_deleted, "after": after, "limit": limit},
        )
        return [definition_record(item) for item in page["agents"]]

    def get_definition(self, definition_id: str, *, include_deleted: bool) -> DefinitionRecord:
        body = self._call(
            "GET", f"/v1/agents/{_seg(definition_id)}", params={"include_deleted": include_deleted}
        )
        return definition_record(body)

    def create_definition(self, definition: JSONObject) -> DefinitionRecord:
        return definition_record(self._call("POST", "/v1/agents", body=definition))

    def update_definition(self, definition_id: str, patch: JSONObject) -> DefinitionUpdate:
        before = self.get_definition(definition_id, include_deleted=False)
        record = definition_record(
            self._call("PATCH", f"/v1/agents/{_seg(definition_id)}", body=patch)
        )
        revision = Revision(
            id=record.current_revision_id,
            definition_id=record.id,
            number=record.current_revision,
            hash=record.hash,
            definition=record.definition,
            created_at_ms=record.updated_at_ms,
        )
        changed = record.current_revision_id != before.current_revision_id
        return DefinitionUpdate(record=record, revision=revision, changed=changed)

    def delete_definition(self, definition_id: str) -> DefinitionRecord:
        return definition_record(self._call("DELETE", f"/v1/agents/{_seg(definition_id)}"))

    # -- sessions ----------------------------------------------------------------------------
    def start_session(
        self,
        definition_id: str,
        *,
        session_id: str | None,
        metadata: JSONObject | None,
        revision_id: str | None = None,
    ) -> SessionRecord:
        body: JSONObject = {"agentId": definition_id}
        if session_id is not None:
            body["sessionId"] = session_id
        if metadata is not None:
            body["metadata"] = metadata
        if revision_id is not None:
            body["revisionId"] = revision_id
        try:
            status, created = self._exchange("POST", "/v1/sessions", body=body)
        except AgentkeepError as error:
            if session_id is not None and error.code == "session_exists":
                raise AgentExistsError(session_id) from None
            raise
        if status != 201 and session_id is not None:
            # The daemon's idempotent start found it; the Backend contract is the library's
            # (a taken id is AgentExistsError), so callers handle a retry the same either way.
            raise AgentExistsError(session_id)
        return session_record(created)

    def get_session(self, session_id: str) -> SessionRecord:
        return session_record(self._call("GET", f"/v1/sessions/{_seg(session_id)}"))

    def list_sessions(
        self,
        *,
        definition_id: str | None,
        include_archived: bool,
        after: str | None,
        limit: int,
    ) -> list[SessionRecord]:
        page = self._call(
            "GET",
            "/v1/sessions",
            params={
                "agent_id": definition_id,
                "include_archived": include_archived,
                "after": after,
                "limit": limit,
            },
        )
        return [session_record(item) for item in page["sessions"]]

    def archive_session(self, session_id: str) -> SessionRecord:
        return session_record(self._call("DELETE", f"/v1/sessions/{_seg(session_id)}"))

    def settle_session(self, session_id: str, *, note: str | None = None) -> SessionRecord:
        body: JSONObject = {} if note is None else {"note": note}
        path = f"/v1/sessions/{_seg(session_id)}/settle"
        return session_record(self._call("POST", path, body=body))

    # -- turns -------------------------------------------------------------------------------
    def send(
        self,
        session_id: str,
        message: str | AgentMessage,
        *,
        delivery: DeliveryKind,
        idempotency_key: str | None,
        metadata: JSONObject | None,
        message_id: str | None = None,
        options: MessageOptions | None = None,
    ) -> SentTurn:
        body: JSONObject = {
            # The wire's AgentMessage as the tool got it: every part kept verbatim.
            "message": message if isinstance(message, str) else msgspec.to_builtins(message),
            "wait": False,
            "delivery": delivery,
        }
        if idempotency_key is not None:
            body["idempotencyKey"] = idempotency_key
        if metadata is not None:
            body["metadata"] = metadata
        if message_id is not None:
            body["messageId"] = message_id
        if options is not None:
            # The wire carries the provider/model/profile selection; the daemon checks it
            # exactly as the library does.
            carried = MessageOptions(
                provider=options.provider, model=options.model, profile=options.profile
            )
            if options != carried:
                raise InvalidMessageError(
                    "Only a provider, a model and a profile can be chosen per message "
                    "through the daemon."
                )
            if options.provider is not None:
                body["provider"] = options.provider
            if options.model is not None:
                body["model"] = options.model
            if options.profile is not None:
                body["profile"] = options.profile
        sent = self._call("POST", f"/v1/sessions/{_seg(session_id)}/messages", body=body)
        return SentTurn(turn=turn_record(sent["turn"]), duplicate=bool(sent["duplicate"]))

    def get_turn(self, session_id: str, turn_id: str) -> TurnRecord:
        return turn_record(
            self._call("GET", f"/v1/sessions/{_seg(session_id)}/turns/{_seg(turn_id)}")
        )

    def wait_turn(self, session_id: str, turn_id: str, *, timeout_seconds: float) -> TurnRecord:
        deadline = time.monotonic() + timeout_seconds
        while True:
            turn = self.get_turn(session_id, turn_id)
            if turn.terminal:
                return turn
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f'Turn "{turn_id}" is still {turn.status}.')
            time.sleep(min(POLL_SECONDS, remaining))

    def turns(self, session_id: str, *, after: int, limit: int) -> list[TurnRecord]:
        page = self._call(
            "GET", f"/v1/sessions/{_seg(session_id)}/turns", params={"after": after, "limit": limit}
        )
        return [turn_record(item) for item in page["turns"]]

    def cancel_turn(self, session_id: str, turn_id: str | None) -> TurnRecord:
        body: JSONObject = {} if turn_id is None else {"turnId": turn_id}
        return turn_record(self._call("POST", f"/v1/sessions/{_seg(session_id)}/cancel", body=body))

    def compact(self, session_id: str, *, timeout_seconds: float) -> Compaction:
        # The daemon bounds the wait itself (its --wait-seconds); a longer one is a 504.
        try:
            done = self._call(
                "POST", f"/v1/sessions/{_seg(session_id)}/compact", body={"wait": True}
            )
        except DaemonError as error:
            if error.code == "timeout":
                raise TimeoutError(str(error)) from None
            raise
        return Compaction(
            context_tokens_before=done.get("contextTokensBefore"),
            messages=done["messages"],
            state=done["state"],
        )

    # -- events ------------------------------------------------------------------------------
    def events(self, session_id: str, *, after: int, limit: int) -> list[SessionEvent]:
        self.get_session(session_id)  # as SystemBackend: an unknown session is unknown_session
        page = self._call(
            "GET",
            f"/v1/sessions/{_seg(session_id)}/events",
            params={"after": after, "limit": limit},
        )
        return [session_event(item) for item in page["events"]]

    def follow(
        self,
        session_id: str,
        *,
        after: int,
        turn_id: str | None = None,
        idle_seconds: float | None = None,
    ) -> Generator[SessionEvent | None, None, None]:
        last = after
        while True:
            idle = IdleBound(idle_seconds)
            for event in self._stream(session_id, after=last, turn_id=turn_id, idle=idle):
                if not event.ephemeral:  # a live delta has no sequence: it moves no resume point
                    last = event.sequence
                yield event
                idle.reset()
            if not idle.passed:
                return  # the stream ended (the turn's end with turn_id, or the daemon's)
            # Nothing arrived in time: a tick, then the stream again from the last event
            # (the SSE resume rule: no event is lost or repeated).
            yield None

    def _stream(
        self, session_id: str, *, after: int, turn_id: str | None, idle: IdleBound
    ) -> Iterator[SessionEvent]:
        """One SSE connection's events; it ends early (``idle.passed``) when ``idle`` passed
        with no event: no byte at all (the read timeout) or only heartbeats."""
        params: dict[str, Any] = {"after": after}
        if turn_id is not None:
            params.update(turn_id=turn_id, until_turn_end="true")
        path = f"/v1/sessions/{_seg(session_id)}/events/stream"
        # Without idle, no read timeout: a stream is quiet between events (heartbeats keep
        # it alive).
        timeout = httpx.Timeout(self._http.timeout.connect, read=idle.seconds)
        headers = {"accept": "text/event-stream", "cache-control": "no-store"}
        try:
            with self._http.stream(
                "GET", path, params=params, headers=headers, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    with contextlib.suppress(ValueError):
                        raise library_error(response.status_code, response.json())
                    raise library_error(response.status_code, None)
                content_type = response.headers.get("content-type", "").partition(";")[0]
                if "text/event-stream" not in content_type:
                    raise DaemonUnreachableError(
                        f"{self.url} answered {path} with {content_type!r}, not an event stream."
                    )
                for frame in parse_sse(idle.watch(sse_lines(response.iter_text()))):
                    if frame.data:
                        yield session_event(msgspec.json.decode(frame.data))
        except IdlePassedError:
            return
        except httpx.ReadTimeout:
            if idle.seconds is None:  # pragma: no cover - no read timeout was set
                raise
            idle.passed = True
        except httpx.TransportError as error:
            raise DaemonUnreachableError(
                f"The event stream of {self.url} ended ({type(error).__name__})."
            ) from error


def _seg(value: str) -> str:
    """One path segment (ids are plain, but a caller's typo must not change the route)."""
    return urllib.parse.quote(value, safe="")


def _query(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value
