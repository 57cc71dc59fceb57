"""Compaction by a summarising request, shared by every vendor adapter.

The model session streams one ordinary request: the whole context followed by a user message that
asks for a summary. The finished text becomes the replacement context, a single user message
that carries the summary, so the next request starts from it. Nothing here retries: the
stream it runs on already owns retries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from agentkeep.providers.protocol import CancelToken
from agentkeep.types import (
    CompactionCancelled,
    CompactionCompleted,
    CompactionFailed,
    CompactionOutcome,
    Context,
    Done,
    Selection,
    StreamEvent,
    TextBlock,
    TextEnd,
    TokenUsage,
    ToolCallEnd,
    Usage,
    UserMessage,
)

SUMMARY_REQUEST = (
    "Summarise the conversation so far so that it can replace the conversation itself. Keep "
    "every fact, decision, open task, file name, identifier and tool result still needed to "
    "continue the work; drop pleasantries and superseded attempts. Do not call any tool. "
    "Answer with the summary only."
)
SUMMARY_PREFIX = "A summary of the conversation so far (it replaces the earlier messages):\n\n"


def compact_by_summary(
    stream: Callable[[Context, Selection, CancelToken], Iterator[StreamEvent]],
    context: Context,
    selection: Selection,
    cancel: CancelToken,
) -> CompactionOutcome:
    """Ask the model for a summary of ``context`` and return the replacement context.

    Args:
        stream: The model session's own ``stream`` (retries and cancellation included).
        context: The conversation to summarise.
        selection: Model and effort for the summarising request.
        cancel: Cancels the summarising request.

    Returns:
        ``CompactionCompleted`` with one user message holding the summary; ``Cancelled`` if
        cancelled; ``Failed`` on an inference error, a tool call, or an empty summary.
    """
    request = Context(
        instructions=context.instructions,
        messages=(*context.messages, UserMessage(content=(TextBlock(text=SUMMARY_REQUEST),))),
    )
    texts: list[str] = []
    usage: Usage | None = None
    called_tool = False
    done: Done | None = None
    for event in stream(request, selection, cancel):
        if isinstance(event, TextEnd):
            texts.append(event.text)
        elif isinstance(event, ToolCallEnd):
            called_tool = True
        elif isinstance(event, TokenUsage):
            usage = event.usage
        elif isinstance(event, Done):
            done = event
    if done is None or done.state == "cancelled":
        return CompactionCancelled()
    if done.state == "error":
        return CompactionFailed(kind="inference_error", message=done.message or "inference failed")
    if called_tool:
        return CompactionFailed(
            kind="tool_call", message="the model called a tool instead of summarising"
        )
    summary = "".join(texts).strip()
    if not summary:
        return CompactionFailed(
            kind="invalid_summary", message="the model returned an empty summary"
        )
    replacement = UserMessage(content=(TextBlock(text=SUMMARY_PREFIX + summary),))
    return CompactionCompleted(messages=(replacement,), summary=summary, usage=usage)
