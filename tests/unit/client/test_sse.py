"""The clients' one SSE parser (``agentkeep.client.sse``): which frames a stream dispatches,
with which ids, however its bytes arrive."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from agentkeep.client.sse import SseFrame, parse_sse, response_frames, sse_lines


def test_each_frame_carries_its_id_and_its_data() -> None:
    lines = ["id: 1", 'data: {"a": 1}', "", "id: 2", 'data: {"b": 2}', ""]
    assert list(parse_sse(lines)) == [
        SseFrame(id="1", data='{"a": 1}'),
        SseFrame(id="2", data='{"b": 2}'),
    ]


def test_data_lines_of_one_frame_are_joined_by_newlines() -> None:
    lines = ["id: 7", "data: first", "data:second", "data: ", "data:  indented", ""]
    # One space after the colon is the separator; anything past it belongs to the value.
    assert list(parse_sse(lines)) == [SseFrame(id="7", data="first\nsecond\n\n indented")]


def test_comments_and_heartbeats_dispatch_nothing() -> None:
    lines = [": ping", "", ":", "", "id: 1", ": a comment inside a frame", "data: x", ""]
    assert list(parse_sse(lines)) == [SseFrame(id="1", data="x")]


def test_a_frame_without_an_id_has_none_and_does_not_inherit_the_last() -> None:
    """The daemon's live text deltas carry no id: they move no resume point."""
    lines = ["id: 4", "data: committed", "", "data: delta", "", "id: 5", "data: next", ""]
    assert list(parse_sse(lines)) == [
        SseFrame(id="4", data="committed"),
        SseFrame(id=None, data="delta"),
        SseFrame(id="5", data="next"),
    ]


def test_a_frame_without_data_and_stray_blank_lines_dispatch_nothing() -> None:
    lines = ["id: 9", "", "", "event: turn", "retry: 100", "", "id: 10", "data: x", ""]
    assert list(parse_sse(lines)) == [SseFrame(id="10", data="x")]


@pytest.mark.parametrize(
    "tail",
    [
        ["id: 3"],  # the id arrived, its data did not
        ["id: 3", "data: cut off by a SIGKILL"],  # the data arrived, its blank line did not
        ["id: 3", "data: one", "data: tw"],
    ],
)
def test_a_frame_cut_by_the_connection_closing_is_never_dispatched(tail: list[str]) -> None:
    lines = ["id: 2", "data: whole", "", *tail]
    assert list(parse_sse(lines)) == [SseFrame(id="2", data="whole")]


def test_lines_end_at_crlf_cr_or_lf_only() -> None:
    text = "a\r\nb\rc\nd\u2028e\x85f\x0bg\n\n"
    assert list(sse_lines([text])) == ["a", "b", "c", "d\u2028e\x85f\x0bg", ""]


def test_a_crlf_split_between_chunks_is_one_line_end() -> None:
    assert list(sse_lines(["a\r", "\nb\r", "\r\n", "c\n"])) == ["a", "b", "", "c"]
    assert list(sse_lines(["a\r", "", "\n", "b\n"])) == ["a", "b"]


def test_the_unterminated_rest_of_a_stream_is_not_a_line() -> None:
    assert list(sse_lines(["id: 1\nda", "ta: x"])) == ["id: 1"]


def _response(body: bytes, chunk_size: int) -> httpx.Response:
    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), chunk_size):
            yield body[start : start + chunk_size]

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 1000])
def test_a_response_read_in_any_chunks_gives_the_same_frames(chunk_size: int) -> None:
    """Multi-byte characters and CRLFs cut across chunks; a raw U+2028 inside a JSON string
    (which ``msgspec`` writes unescaped) stays in its line, where ``iter_lines`` would cut it."""
    event = {"sequence": 1, "text": "é\u2028ü ✓"}
    body = (
        b": ping\r\n\r\n"
        + b"id: 1\r\ndata: "
        + json.dumps(event, ensure_ascii=False).encode()
        + b"\r\n\r\n"
        + b'data: {"sequence": 0}\n\n'
        + b"id: 2\ndata: cut"
    )
    frames = list(response_frames(_response(body, chunk_size)))
    assert [frame.id for frame in frames] == ["1", None]
    assert json.loads(frames[0].data) == event
    assert json.loads(frames[1].data) == {"sequence": 0}
