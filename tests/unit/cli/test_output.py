"""How the CLI renders message content."""

from __future__ import annotations

import agentkeep as ak
from agentkeep.cli.output import block_text


def test_a_tool_request_block_is_shown_with_its_arguments() -> None:
    message = ak.user(["/calc ", ak.tool_request("add", {"b": 2, "a": 1})])
    assert block_text(message.content) == '/calc [tool request add {"a": 1, "b": 2}]'


def test_an_image_is_a_placeholder() -> None:
    image = ak.ImageBlock(data="aGk=", mime_type="image/png")
    assert block_text((ak.TextBlock(text="see "), image)) == "see [image image/png]"
