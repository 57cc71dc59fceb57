"""``types/parts.py`` is the one conversion between the wire's
``AgentMessage`` parts and content blocks: nothing a client sends is lost, and a model is
shown a reference or data part as one line of text."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentkeep as ak
from agentkeep.messages import from_wire, wire_input
from agentkeep.sessions import DataPart, ReferencePart, TextPart, WireMessage
from agentkeep.types import input_blocks
from agentkeep.types.parts import (
    TOOL_CALL_REQUEST,
    as_wire_json,
    decode_message,
    message_json,
    part_block,
    parts_of,
)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
_parts = st.lists(
    st.one_of(
        st.builds(TextPart, text=st.text()),
        st.builds(
            ReferencePart,
            uri=st.text(min_size=1),
            name=st.none() | st.text(),
            media_type=st.none() | st.text(),
        ),
        st.builds(DataPart, name=st.text(), data=_json),
    ),
    max_size=5,
)


@given(_parts)
def test_parts_round_trip_through_blocks(parts: list[TextPart]) -> None:
    blocks = [part_block(p) for p in parts]
    assert list(parts_of(blocks)) == parts
    wire = message_json("user", blocks)
    assert decode_message(wire) == WireMessage(role="user", parts=tuple(parts))


def test_an_image_is_a_data_uri_reference_and_back() -> None:
    image = ak.ImageBlock(data="aGk=", mime_type="image/png")
    (part,) = parts_of([image])
    assert part == ReferencePart(uri="data:image/png;base64,aGk=", media_type="image/png")
    assert part_block(part) == image


def test_a_model_sees_references_and_data_as_text_and_the_input_keeps_them() -> None:
    wire = {
        "role": "user",
        "parts": [
            {"type": "text", "text": "Look:"},
            {
                "type": "reference",
                "uri": "https://x.test/a",
                "name": None,
                "mediaType": "text/html",
            },
            {"type": "data", "name": "row", "data": {"b": [1, None]}},
        ],
    }
    message = from_wire(wire)
    assert isinstance(message, ak.UserMessage)
    assert input_blocks(message.content) == (
        ak.TextBlock(text="Look:"),
        ak.TextBlock(text="[reference: <https://x.test/a> (text/html)]"),
        ak.TextBlock(text='[data row: {"b":[1,null]}]'),
    )
    assert wire_input(message) == wire


def test_a_system_message_shows_references_as_text_and_assistant_input_is_refused() -> None:
    reference = {"type": "reference", "uri": "file:///a", "name": "a", "mediaType": None}
    system = from_wire({"role": "system", "parts": [reference]})
    assert system == ak.SystemMessage(content=(ak.TextBlock(text="[reference: a <file:///a>]"),))
    with pytest.raises(ak.InvalidMessageError, match=r"message\.role"):
        from_wire({"role": "assistant", "parts": []})
    with pytest.raises(ak.InvalidMessageError, match=r"parts\[0\]"):
        from_wire({"role": "user", "parts": [{"type": "image"}]})


def test_stored_messages_of_content_blocks_are_shown_as_parts() -> None:
    request = ak.tool_request("calc", {"x": 1})
    old = msgspec.to_builtins(ak.user(["hi", request]))
    assert as_wire_json(old) == {
        "role": "user",
        "parts": [
            {"type": "text", "text": "hi"},
            {"type": "data", "name": TOOL_CALL_REQUEST, "data": msgspec.to_builtins(request)},
        ],
    }
    answer = {"role": "assistant", "content": [{"type": "reasoning", "text": "r"}]}
    assert as_wire_json(answer) == {"role": "assistant", "parts": []}
