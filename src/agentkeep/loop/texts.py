"""The texts the loop writes into the conversation for calls and compactions that did not run
as asked, for a turn that failed, and before continuing a
response whose completed blocks end the conversation (docs/lifecycle.md)."""

from agentkeep.types import SystemMessage, TextBlock

ABORTED_CALL = "The tool call was aborted."
STEERED_CALL = "The tool call was interrupted by new steering."
DRAINED_CALL = "The tool call was interrupted by a shutdown."
UNDISPATCHED_CALL = "The response ended before this tool call was dispatched."
FAILED_TURN_CALL = "The turn failed before this tool call finished."
ABORTED_COMPACTION = "The compaction was cancelled by an abort."
FAILURE_NOTE = "The last turn failed: {}"
CONTINUE_TEXT = "Continue from where you left off."
CONTINUE_NOTICE = SystemMessage(content=(TextBlock(text=CONTINUE_TEXT),))
