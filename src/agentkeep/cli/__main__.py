"""``python -m agentkeep.cli``: the same as the ``agentkeep`` command."""

from agentkeep.cli import main

main()
