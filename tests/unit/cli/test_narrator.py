"""The demos' one narrator (``agentkeep.cli.narrator``): numbered steps, indented lines."""

from __future__ import annotations

import io

from agentkeep.cli.narrator import Narrator
from agentkeep.cli.output import Console


def test_steps_are_numbered_and_their_lines_indented_under_the_title() -> None:
    out = io.StringIO()
    console = Console(out)
    narrator = Narrator(console)
    narrator.step(1, "Start the daemon")
    narrator.say("pid 42")
    console.write("a partial line")  # a streamed answer the next step must not run into
    narrator.step(2, "Kill it")
    narrator.say("gone")
    assert out.getvalue() == (
        "\n1. Start the daemon\n   pid 42\na partial line\n\n2. Kill it\n   gone\n"
    )
