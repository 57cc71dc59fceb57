"""Archived history on the command line: ``transcript --all`` renders it, ``purge`` deletes it.

A model switch that restarts the conversation, and a compaction, archive the records they take
out of the provider's view (:mod:`agentkeep.history`). Nothing deletes them but
``agentkeep purge ID --archived``, which asks nothing and prints what it deleted.
"""

from __future__ import annotations

from typing import Any

import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError, render_transcript
from agentkeep.cli.runtime import open_store
from agentkeep.history import HistoryEpoch, purge_archived

_REASONS = {"model_switch": "model switch", "compaction": "compaction"}


def _selection(epoch: HistoryEpoch) -> str:
    return f"{epoch.provider or '(default)'} / {epoch.model or '(default)'}"


def render_history(epochs: list[HistoryEpoch]) -> str:
    """Each epoch under a header; archived ones say so, and why."""
    blocks: list[str] = []
    for epoch in epochs:
        if epoch.archived:
            reason = _REASONS.get(epoch.reason or "", epoch.reason or "")
            header = (
                f"=== epoch {epoch.number} (ARCHIVED by a {reason}; was {_selection(epoch)}) ==="
            )
        else:
            header = f"=== epoch {epoch.number} (current; {_selection(epoch)}) ==="
        body = render_transcript(list(epoch.messages)) or "(no messages)"
        blocks.append(f"{header}\n{body}")
    return "\n\n".join(blocks)


@click.command()
@click.argument("agent_id")
@click.option(
    "--archived",
    is_flag=True,
    help="Delete the archived epochs (see `transcript --all`); required.",
)
@pass_state
def purge(state: CliState, agent_id: str, archived: bool) -> None:
    """Physically delete an agent's archived history (asks nothing; the current conversation
    stays). Model switches and compactions archive; only this command deletes."""
    if not archived:
        raise CliError(
            "Say what to purge: only --archived (the archived epochs) can be purged.",
            code="nothing_to_purge",
            hint=f"Run `agentkeep session transcript {agent_id} --all` to see them, then "
            f"`agentkeep purge {agent_id} --archived`.",
            exit_code=EXIT_BAD_INPUT,
        )
    with open_store(state.home) as store:
        result = store.transact(lambda tx: purge_archived(tx, agent_id))
    value = {"id": agent_id, "purged_epochs": result.epochs, "purged_records": result.records}

    def render(v: dict[str, Any]) -> str:
        if not v["purged_epochs"]:
            return f"{v['id']} has no archived history"
        return (
            f"purged {v['purged_epochs']} archived epoch(s), "
            f"{v['purged_records']} record(s), of {v['id']}"
        )

    state.output.result(value, render)
