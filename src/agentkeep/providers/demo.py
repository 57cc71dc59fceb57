"""``DemoModel``: a deterministic local model that calls real tools (the CLI's default).

Like :class:`~agentkeep.providers.RespondingModel` (which it extends) its answer is a pure
function of the conversation, so an agent restarted after a crash hears exactly what its dead
predecessor heard, with the same call ids. It reads the last user message and calls, in the
order they appear in the text, ``calculator`` for arithmetic (``12 * (3 + 4)``),
``word_count`` for ``count the words in "..."`` and ``save_note`` for ``note "..."``, all in
one tool batch; after the results it answers in a sentence built from them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

import msgspec

from agentkeep.providers.responding import RespondingModel, count_conversation
from agentkeep.types import (
    AssistantMessage,
    Context,
    Done,
    ImageBlock,
    Message,
    StreamEvent,
    TextBlock,
    TextDelta,
    TextEnd,
    TextStart,
    Tokens,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResultMessage,
    Usage,
    UserMessage,
)

DEMO_PROVIDER = "demo"
DEMO_MODEL = "demo-1"
HELP_ANSWER = (
    'I can do arithmetic (try "What is 12 * 7?"), count the words in "some text" and '
    'save a note "to remember".'
)

_QUOTED = re.compile(r'"([^"]*)"')
_NOTE = re.compile(r'\bnote\b[:\s]*"([^"]+)"', re.IGNORECASE)
_WORDS = re.compile(r'\bcount (?:the )?words (?:in|of)\s*"([^"]+)"', re.IGNORECASE)
_ARITHMETIC = re.compile(r"[\d(][\d\s.+\-*/%()]*[\d)]")
_OPERATOR = re.compile(r"\d\s*\)*\s*(?:\*\*|//|[+\-*/%])\s*\(*\s*-?\d")


def _text(blocks: tuple[object, ...]) -> str:
    """The text of content blocks (an image as a placeholder, other blocks skipped)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(f"[image {block.mime_type}]")
    return "".join(parts)


def plan_calls(text: str) -> list[tuple[str, dict[str, str]]]:
    """The tool calls a user message asks for, in the order the text asks for them."""
    found: list[tuple[int, str, dict[str, str]]] = []
    for match in _NOTE.finditer(text):
        found.append((match.start(), "save_note", {"text": match.group(1)}))
    for match in _WORDS.finditer(text):
        found.append((match.start(), "word_count", {"text": match.group(1)}))
    # Arithmetic only outside quotes: a note may well contain numbers.
    unquoted = _QUOTED.sub(lambda m: " " * len(m.group(0)), text)
    for match in _ARITHMETIC.finditer(unquoted):
        expression = " ".join(match.group(0).split())
        if _OPERATOR.search(expression) and expression.count("(") == expression.count(")"):
            found.append((match.start(), "calculator", {"expression": expression}))
    return [(name, args) for _, name, args in sorted(found, key=lambda item: item[0])]


def _argument(call: ToolCallBlock, key: str) -> str:
    try:
        value = msgspec.json.decode(call.arguments)
    except msgspec.DecodeError:
        return call.arguments
    return str(value.get(key, "")) if isinstance(value, dict) else call.arguments


def summarise_results(messages: tuple[Message, ...]) -> str:
    """One sentence per call of the last tool batch, from its results."""
    batch: list[ToolCallBlock] = []
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            batch = [b for b in message.content if isinstance(b, ToolCallBlock) and not b.server]
            start = index
            break
    results = {m.call_id: m for m in messages[start + 1 :] if isinstance(m, ToolResultMessage)}
    sentences: list[str] = []
    for call in batch:
        result = results.get(call.call_id)
        text = _text(result.content) if result is not None else "no result"
        if result is not None and result.is_error:
            if call.name == "save_note":
                sentences.append(
                    f'I did not retry the note "{_argument(call, "text")}": {text} '
                    "Check notes.txt before saving it again."
                )
            else:
                sentences.append(f"{call.name} failed: {text}")
        elif call.name == "calculator":
            sentences.append(f"{_argument(call, 'expression')} = {text}.")
        elif call.name == "word_count":
            sentences.append(f'"{_argument(call, "text")}" has {text} words.')
        elif call.name == "save_note":
            sentences.append(f'I saved the note "{_argument(call, "text")}".')
        else:
            sentences.append(f"{call.name} answered {text}.")
    return " ".join(sentences) or "Done."


def _words(text: str) -> list[str]:
    parts = re.findall(r"\S+\s*", text)
    return parts or [text]


class DemoModel(RespondingModel):
    """A deterministic local model that answers arithmetic, word counts and notes with tool
    calls (see the module docstring): ``calculator`` (``{"expression": "12 * 7"}``),
    ``word_count`` (``{"text": ...}``) and ``save_note`` (``{"text": ...}``). Offer the
    tools it calls; the CLI's are in ``agentkeep.cli.tools``.

    Args:
        latency_seconds: Delay before each stream event (waited on the cancel token), so
            people can watch the answer stream in.
        models: The model names it serves; ``demo-1`` unless given.
    """

    def __init__(
        self, *, latency_seconds: float = 0.0, models: Iterable[str] = (DEMO_MODEL,)
    ) -> None:
        super().__init__(latency_seconds=latency_seconds, models=models)

    def response(self, context: Context, rng: random.Random) -> list[StreamEvent]:
        """The events answering ``context``: a tool batch for a new user message, else text."""
        messages = context.messages
        _, calls_so_far = count_conversation(messages)
        tokens = Tokens(input=10 * len(messages), output=5)
        usage = TokenUsage(usage=Usage(input=tokens.input, output=tokens.output))
        last = messages[-1] if messages else None
        if isinstance(last, UserMessage):
            planned = plan_calls(_text(last.content))
            if planned:
                events: list[StreamEvent] = []
                for offset, (name, args) in enumerate(planned):
                    call_id = f"call-{calls_so_far + offset}"
                    arguments = msgspec.json.encode(args).decode()
                    events += [
                        ToolCallStart(call_id=call_id, name=name),
                        ToolCallDelta(call_id=call_id, delta=arguments),
                        ToolCallEnd(call_id=call_id, arguments=arguments),
                    ]
                return [*events, usage, Done(state="tool_call", tokens=tokens)]
            answer = HELP_ANSWER
        elif isinstance(last, ToolResultMessage):
            answer = summarise_results(messages)
        else:
            answer = "Noted."
        deltas: list[StreamEvent] = [TextDelta(delta=part) for part in _words(answer)]
        return [
            TextStart(),
            *deltas,
            TextEnd(text=answer),
            usage,
            Done(state="normal", tokens=tokens),
        ]
