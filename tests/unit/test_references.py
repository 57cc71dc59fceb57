"""The repository explains itself: what ``src/`` and ``docs/`` cite is in the repository.

A section sign with a number (``§3.5``), "spec §", an issue number ("issue 17"), a seed
number ("seed 002") or an invariant by the base spec's number ("invariant 17") points at a
document this repository does not ship, or at history. The code and docs cite the promise by
its number here ("invariant I14", docs/invariants.md) or the docs page that states the rule.
``CHANGELOG.md`` is history and is not scanned.

A few places may still say them, each for a reason (:data:`ALLOWED`); every entry must still
match something, so the list cannot outlive its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INVARIANTS = REPO / "docs" / "invariants.md"

#: What points outside the repository or at history. Whitespace (a line break, a comment's
#: ``#``) may separate the words.
FORBIDDEN = re.compile(
    r"§\s*\d|\bspec\s+§|\bissues?\s+(?:#\s*)?\d|\bseed[\s#-]*00\d|\binvariants?\s+\d",
    re.IGNORECASE,
)

#: (path from the repository root, text on the offending line) → why it may stay.
ALLOWED: dict[tuple[str, str], str] = {
    # The one statement of provenance: the wire follows seed 002 (docs/architecture.md, Words).
    ("docs/architecture.md", "project's seed 002"): "the provenance of the wire, said once",
    # docs/invariants.md maps the base spec's invariant numbers (§7) to I1-I37: the table the
    # chaos output's labels are read with.
    ("docs/invariants.md", "its §7"): "the mapping from the base spec's numbers",
    ("docs/invariants.md", "| spec §7 |"): "the mapping table's header",
    # The chaos checker labels a violation with the base spec's number ("§7.9 (...)") and two
    # parsers read that label back; changing the label changes the campaigns' output.
    ("src/agentkeep/chaos/invariants.py", 'f"§7.{self.invariant}"'): "the checker's label",
    ("src/agentkeep/chaos/ledger_sweep.py", r'r"^(?:§7\.(\d+)'): "parses the label",
    ("src/agentkeep/chaos/ledger_sweep.py", 'f"§7.{match.group(1)}"'): "prints the label",
    ("src/agentkeep/cli/chaos_suites.py", r'r"^(?:§7\.(\d+)'): "parses the label",
    ("src/agentkeep/chaos/invariants.py", "archived (issue 12)"): "an invariant's printed name",
    # Text users see (help, error messages, tool and API descriptions): output, not comments;
    # rewording it is a change of behaviour, left to its own change.
    ("src/agentkeep/cli/__init__.py", '"seed 002\'s spelling."'): "--home's help text",
    ("src/agentkeep/cli/message_input.py", "is not seed 002's AgentMessage"): "an error message",
    ("src/agentkeep/cli/message_input.py", "The message is seed 002's"): "--message-json's help",
    ("src/agentkeep/drivers/turn_endings.py", "(seed 002's \""): "an error message",
    ("src/agentkeep/drivers/context.py", "(seed 002\\'s AgentMessage"): "an error message",
    ("src/agentkeep/mcp/types.py", '[...]} (seed 002)."'): "an MCP argument description",
    ("src/agentkeep/mcp/tools.py", "(seed 002's AgentDefinitionInput"): "an MCP tool description",
    ("src/agentkeep/server/openapi.py", "\"Seed 002's REST API"): "the OpenAPI description",
}


def scanned() -> list[Path]:
    files = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "docs").rglob("*.md"))
    return [path for path in files if path.name != "CHANGELOG.md"]


def findings() -> tuple[list[str], set[tuple[str, str]]]:
    """Each reference no allowance covers, and the allowances that covered something."""
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in scanned():
        name = path.relative_to(REPO).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            # A reference may be split over two lines ("seed\n002"): join the next one.
            joined = line + " " + (lines[number].strip() if number < len(lines) else "")
            for match in FORBIDDEN.finditer(joined):
                if match.start() >= len(line):
                    continue  # found again on the next line
                keys = [key for key in ALLOWED if key[0] == name and key[1] in line]
                if keys:
                    used.update(keys)
                else:
                    found.append(f"{name}:{number}: {match.group(0)!r} in {line.strip()!r}")
    return found, used


def test_src_and_docs_cite_only_what_the_repository_holds() -> None:
    found, _ = findings()
    assert not found, "references outside the repository or to history:\n" + "\n".join(found)


def test_every_allowance_is_still_needed() -> None:
    _, used = findings()
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"allowances that match nothing any more: {stale}"


def test_every_cited_invariant_is_in_the_invariants_page() -> None:
    defined = set(re.findall(r"^\| (I\d+) \|", INVARIANTS.read_text(encoding="utf-8"), re.M))
    assert len(defined) >= 30
    cited: dict[str, str] = {}
    for path in sorted((REPO / "src").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for group in re.findall(r"\binvariants?\s+(I\d+(?:(?:,\s*|\s+and\s+)I\d+)*)", text):
            for number in re.findall(r"I\d+", group):
                cited[number] = path.relative_to(REPO).as_posix()
    assert len(cited) >= 15, cited  # the code does cite them
    missing = {number: where for number, where in cited.items() if number not in defined}
    assert not missing, f"invariants cited but not in docs/invariants.md: {missing}"
