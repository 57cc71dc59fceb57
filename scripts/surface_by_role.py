"""Issue 30 item 8: the names that left ``agentkeep.__all__`` and the subpackage each lives in.

Run once over the tree (``python scripts/surface_by_role.py FILE...``) to rewrite
``ak.Name`` / ``agentkeep.Name`` / ``from agentkeep import Name`` uses of a moved name into an
import from its subpackage. Kept as the record of the move (CHANGELOG lists the same table).
In the same change the store's records (``QueuedMessage``, ``BlockRecord``, ``OwedWork``, ...)
and ``apply_options`` left ``agentkeep.types.__all__``: they are imported from
``agentkeep.types.records`` and ``agentkeep.types.selection``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MOVED: dict[str, str] = {}
for package, names in {
    # stream events and the values a provider is handed: pure value types
    "agentkeep.types": """BlockReset BlockStart BlockStop Context Done ModelSessionOptions
        ProviderErrorInfo ReasoningDelta ReasoningEnd ReasoningStart Retrying Selection
        StreamEvent TextDelta TextEnd TextStart TokenUsage ToolCallDelta ToolCallEnd
        ToolCallStart ToolDescriptor ToolResultDelta ToolResultEnd ToolResultStart""",
    # what a provider implementer writes against, and the test models built on it
    "agentkeep.providers": """CancelToken CompactionRequest ModelSession ModelSessionBusyError
        ModelSessionClosedError OpenedModelSession Provider RespondingModel ServesModels
        StreamRequest""",
    # seed 002's sessions, turns and ledger: the service, its records, wire values, errors
    "agentkeep.sessions": """DataPart EventTooLargeError InputTooLargeError ReferencePart
        SessionBusyError SessionConfigError SessionError SessionEvent SessionOwes SessionRecord
        Sessions Subscription TextPart TurnFailure TurnHandle TurnRecord UnknownSessionError
        UnknownTurnError UnsupportedDriverError WireMessage""",
    # seed 002's agents: versioned definitions
    "agentkeep.registry": """Definition DefinitionDeletedError DefinitionExistsError
        DefinitionInput DefinitionPatch DefinitionRecord DefinitionUpdate DriverPatch DriverRef
        InvalidDefinitionError ModelInput ModelRef Registry RegistryError Resources
        ResourcesPatch Revision Toolbox ToolboxPatch UnknownDefinitionError
        UnknownRevisionError Workspace WorkspacePatch""",
    # injected drivers
    "agentkeep.drivers": """Driver DriverCancelledError DriverContext DriverContextClosedError
        DriverError DriverResult DriverRunRequest DriverSignal InvalidDriverEventError""",
}.items():
    for name in names.split():
        MOVED[name] = package

_FROM = re.compile(r"^(?P<indent>[ \t]*)from agentkeep import (?P<body>\([^)]*\)|[^\n]*)$", re.M)
_STRINGS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"[^"\n]*"|\'[^\'\n]*\'|#[^\n]*')
_ALIAS = re.compile(r"^\s*import agentkeep as (\w+)\s*$", re.M)


def _names(body: str) -> list[str]:
    body = body.strip().strip("()")
    body = re.sub(r"#[^\n]*", "", body)
    return [n.strip() for n in body.replace("\n", ",").split(",") if n.strip()]


def rewrite(text: str, python: bool) -> str:
    needed: dict[str, set[str]] = {}

    # from agentkeep import A, B  -> split moved names out
    def from_import(match: re.Match[str]) -> str:
        names = _names(match["body"])
        kept = [n for n in names if n.split(" as ")[0] not in MOVED]
        moved = [n for n in names if n.split(" as ")[0] in MOVED]
        if not moved:
            return match[0]
        lines = []
        indent = match["indent"]
        if kept:
            lines.append(f"{indent}from agentkeep import {', '.join(kept)}")
        by_package: dict[str, list[str]] = {}
        for n in moved:
            by_package.setdefault(MOVED[n.split(" as ")[0]], []).append(n)
        for package, ns in sorted(by_package.items()):
            lines.append(f"{indent}from {package} import {', '.join(ns)}")
        return "\n".join(lines)

    text = _FROM.sub(from_import, text)
    # ``ak.Name`` in a module that imports ``agentkeep as ak`` becomes an import of ``Name``;
    # ``agentkeep.Name`` (docstrings, prose, ``import agentkeep``) becomes ``agentkeep.pkg.Name``.
    aliases = ["ak", "agentkeep"]
    for alias in aliases:
        python_alias = python and alias == "ak" and bool(_ALIAS.search(text))
        pattern = re.compile(rf"(?<![\w.]){alias}\.(\w+)\b")
        names = {m[1] for m in pattern.finditer(text) if m[1] in MOVED}
        for name in sorted(names):
            package = MOVED[name]
            bare = re.compile(rf"(?<![\w.]){name}\b")
            code = _STRINGS.sub("", re.sub(rf"(?<![\w.]){alias}\.{name}\b", "", text))
            collision = python_alias and bool(bare.search(code))
            if python_alias and not collision:
                text = re.sub(rf"(?<![\w.]){alias}\.{name}\b", name, text)
                needed.setdefault(package, set()).add(name)
            else:
                # prose, or a file where the bare name means something else
                text = re.sub(
                    rf"(?<![\w.]){alias}\.{name}\b",
                    f"{alias}.{package[len('agentkeep.') :]}.{name}",
                    text,
                )
    if python and needed:
        lines = "".join(
            f"from {package} import {', '.join(sorted(ns))}\n"
            for package, ns in sorted(needed.items())
        )
        anchor = re.search(
            r"^(import agentkeep as ak|import agentkeep|from agentkeep[\w.]* import)", text, re.M
        )
        if anchor is None:
            raise SystemExit("no agentkeep import to anchor on")
        text = text[: anchor.start()] + lines + text[anchor.start() :]
    return text


def main() -> None:
    for arg in sys.argv[1:]:
        path = Path(arg)
        old = path.read_text()
        new = rewrite(old, python=path.suffix == ".py")
        if new != old:
            path.write_text(new)
            print(path)


if __name__ == "__main__":
    main()
