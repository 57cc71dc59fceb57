"""The README's embedding example runs as printed, and ``open`` checks its ``tools`` and
``features`` (a placeholder such as ``tools=[...]`` would make every turn fail with
``'ellipsis' object has no attribute 'key'``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_the_readme_python_blocks_run_in_order_as_printed(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2  # the tool definition, then the system that uses it
    script = tmp_path / "readme_example.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The model's answer makes sense: it counted the words with the README's tool.
    assert '"the quick brown fox" has 4 words.' in done.stdout.splitlines()
    assert (tmp_path / ".agentkeep" / "agents.db").is_file()


def test_the_readme_links_only_to_files_in_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)", text)
    assert targets  # the pin is not vacuous
    for target in targets:
        assert not target.startswith(("http://", "https://", "/")), target
        resolved = (ROOT / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{target} leaves the repository"
        assert resolved.exists(), f"{target} does not exist"


def _open(tmp_path: Path, **options: Any) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("demo", ak.DemoModel(), kind="gym")
    return ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="demo", model="demo-1", **options
    )


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([...], r"tools\[0\] is Ellipsis \(ellipsis\), not an ak.Tool"),
        (["word_count"], r"tools\[0\] is 'word_count' \(str\), not an ak.Tool"),
        ("word_count", r"tools must be a list, got str"),
        (None, r"tools must be a list, got NoneType"),
    ],
)
def test_open_refuses_what_is_not_a_tool_naming_it(
    tmp_path: Path, tools: Any, message: str
) -> None:
    with pytest.raises(ak.InvalidConfigError, match=message):
        _open(tmp_path, tools=tools)
    # Nothing was left holding the store: a correct open works at once.
    _open(tmp_path).close()


class NoArgs(msgspec.Struct):
    pass


def test_open_refuses_a_second_element_that_is_not_a_tool(tmp_path: Path) -> None:
    @ak.tool
    def noop(ctx: ak.ToolContext, args: NoArgs) -> str:
        """Do nothing."""
        return ""

    with pytest.raises(ak.InvalidConfigError, match=r"tools\[1\] is 42 \(int\)"):
        _open(tmp_path, tools=[noop, 42])
    with pytest.raises(ak.ToolDefinitionError, match='"noop" is defined twice'):
        _open(tmp_path, tools=[noop, noop])


def test_open_refuses_what_is_not_a_feature(tmp_path: Path) -> None:
    with pytest.raises(ak.InvalidConfigError, match=r"features\[0\] is Ellipsis"):
        _open(tmp_path, features=[...])

    class Nameless(ak.Feature):
        pass

    with pytest.raises(ak.InvalidConfigError, match="non-empty name"):
        _open(tmp_path, features=[Nameless()])
