"""What a tool call answers the model: :class:`ToolOutput` and :class:`ToolError`, the
default renderers of a result, and the type parameters of a :class:`~agentkeep.tools.Tool`.

The bottom of the tools package: plain values that the definition, the validation and the
hooks all share, importing nothing of the package.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from agentkeep.types import ImageBlock, OutputBlock, TextBlock

# The type parameters of a ``Tool`` (its arguments and result), shared by its helpers.
ArgsT = TypeVar("ArgsT")
ResultT = TypeVar("ResultT")


class ToolOutput(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call answers the model: content blocks and whether it is an error."""

    content: tuple[OutputBlock, ...]
    is_error: bool = False


class ToolError(msgspec.Struct, frozen=True):
    """A refusal or failure of a tool call, answered to the model as an error result."""

    message: str

    def to_output(self) -> ToolOutput:
        """The error result the model is shown: the message, marked as an error."""
        return ToolOutput(content=(TextBlock(text=self.message),), is_error=True)


def default_to_llm(result: object) -> tuple[OutputBlock, ...]:
    """Strings and content blocks as they are; anything else as its JSON text."""
    if isinstance(result, str):
        return (TextBlock(text=result),)
    if isinstance(result, TextBlock | ImageBlock):
        return (result,)
    return (TextBlock(text=msgspec.json.encode(result).decode()),)


def never_error(result: object) -> bool:
    """The default ``Tool.is_error``: no validated result is an error result."""
    return False
