"""A session's ``authRef``, resolved by the embedder's credential resolver, is the API key of
its requests on the vendor's real wire (a local server speaking the Messages API), and the
secret is never stored, logged or put on the ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.postgres_server import on_sqlite

import agentkeep as ak
from agentkeep.persistence.readonly import ReadOnlyStore
from agentkeep.providers import (
    AnthropicProvider,
    CancelToken,
    Credential,
    OpenAICompatibleProvider,
    UsesCredentials,
)
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import Context, ModelSessionOptions, Selection, TextBlock, UserMessage

PROVIDER_KEY = "sk-ant-the-providers-own-key"
TEAM_SECRET = "sk-ant-team-secret-0123456789"
ROTATED_SECRET = "sk-ant-rotated-secret-9876543210"


def _reply(server: Any, text: str) -> Any:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-test",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    return server.Reply(frames=server.typed_sse(*events))


def _sent_key(request: Any) -> str:
    key = request.headers.get("x-api-key")
    return key if key is not None else request.headers["authorization"].removeprefix("Bearer ")


def _stored_bytes(root: Path, state: Path) -> bytes:
    """Every file under ``root`` (SQLite's database, its WAL) and every row of the state
    directory's store as text (on the PostgreSQL pass the store is on the server)."""
    files = b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())
    if on_sqlite():
        return files
    store = ReadOnlyStore.open(state)
    try:
        rows = store.read(_every_row_as_text)
    finally:
        store.close()
    return files + "\n".join(rows).encode()


def _every_row_as_text(tx: Any) -> list[str]:
    tables = tx.sql.query(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = current_schema() ORDER BY table_name"
    )
    return [
        str(text)
        for (table,) in tables
        for (text,) in tx.sql.query(f'SELECT t::text FROM "{table}" t')
    ]


def test_the_resolved_secret_is_the_requests_api_key_and_never_stored(
    server: Any, retry_policy: RetryPolicy, tmp_path: Path, capfd: Any
) -> None:
    secrets = {"team-key": TEAM_SECRET}
    asked: list[str] = []

    def resolver(ref: str) -> str | None:
        asked.append(ref)
        return secrets.get(ref)

    provider = AnthropicProvider(
        api_key=PROVIDER_KEY, base_url=server.url, model="claude-test", retry=retry_policy
    )
    providers = ak.Providers()
    providers.add("anthropic", provider, kind="claude")
    providers.add("own", provider, kind="claude")
    state = tmp_path / "state"
    server.queue(_reply(server, "one"), _reply(server, "two"), _reply(server, "three"))
    with ak.AgentSystem.open(
        state, providers=providers, provider="own", model="claude-test", credentials=resolver
    ) as system:
        system.registry.create(
            {"id": "reviewer", "model": {"id": "anthropic/claude-test"}, "authRef": "team-key"}
        )
        session = system.sessions.start("reviewer")
        plain = system.create()

        first = system.sessions.send(session.id, "hello").wait(timeout_seconds=30)
        secrets["team-key"] = ROTATED_SECRET  # rotated: the next request picks it up
        second = system.sessions.send(session.id, "again").wait(timeout_seconds=30)
        third = system.sessions.send(plain.id, "no definition").wait(timeout_seconds=30)

        assert [first.status, second.status, third.status] == ["completed"] * 3
        events = system.events(session.id, limit=1000)
    provider.close()

    assert asked
    assert set(asked) == {"team-key"}
    assert [_sent_key(r) for r in server.requests] == [TEAM_SECRET, ROTATED_SECRET, PROVIDER_KEY]
    stored = _stored_bytes(tmp_path, state)
    logged = "".join(capfd.readouterr())
    for secret in (TEAM_SECRET, ROTATED_SECRET):
        assert secret.encode() not in stored  # not in the database, its WAL, or any file
        assert all(secret not in repr(event) for event in events)  # not on the ledger
        assert secret not in logged  # not logged
    assert b"team-key" in stored  # the reference is (the definition's authRef)


def _chat_reply(server: Any, text: str) -> Any:
    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        usage = None if delta is not None else {"prompt_tokens": 3, "completion_tokens": 2}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1760000000,
            "model": "qwen3-8b",
            "choices": choices,
            "usage": usage,
        }

    chunks = [chunk({"role": "assistant", "content": text}), chunk({}, "stop"), chunk(None)]
    return server.Reply(frames=[*(server.sse(None, c) for c in chunks), server.sse(None, "[DONE]")])


def test_the_openai_adapters_send_the_credential_as_their_bearer_key(
    server: Any, retry_policy: RetryPolicy
) -> None:
    provider = OpenAICompatibleProvider(
        api_key=PROVIDER_KEY, base_url=f"{server.url}/v1", model="qwen3-8b", retry=retry_policy
    )
    assert isinstance(provider, UsesCredentials)
    options = ModelSessionOptions(instructions="Be brief.")
    context = Context(
        instructions="Be brief.", messages=(UserMessage(content=(TextBlock(text="hi"),)),)
    )
    server.queue(_chat_reply(server, "one"), _chat_reply(server, "two"))
    keyed = provider.open_model_session_as("a1", options, Credential("team-key", TEAM_SECRET))
    own = provider.open_model_session("a2", options)
    try:
        for session in (keyed, own):
            events = list(session.stream(context, Selection(), CancelToken()))
            assert events[-1].state == "normal"  # type: ignore[union-attr]
        assert TEAM_SECRET not in repr(keyed)
    finally:
        keyed.close()
        own.close()
        provider.close()
    assert [_sent_key(r) for r in server.requests] == [TEAM_SECRET, PROVIDER_KEY]
