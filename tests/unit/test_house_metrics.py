"""``scripts/house_metrics.py`` (the house's figures) runs on this repository and
prints each of its sections; its import-cycle and ``Transaction`` counts are right on small
synthetic trees (a cycle closed only by a lazy or a ``TYPE_CHECKING`` import still counts; a
protocol composed of per-table objects is counted per object)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import agentkeep

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "house_metrics.py"
SECTIONS = (
    "## modules and lines by package",
    "## top-level files",
    "## import cycles",
    "## largest module and function",
    "## agentkeep.__all__",
    "## Transaction protocol members",
    "## README",
    "## § and seed 00x references in src/ and docs/",
)


def run(root: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_script_prints_every_section_for_this_repository() -> None:
    out = run(REPO)
    positions = [out.index(title) for title in SECTIONS]
    assert positions == sorted(positions)
    total = re.search(r"^total\s+(\d+) modules\s+(\d+) lines$", out, flags=re.M)
    assert total is not None
    assert int(total.group(1)) == len(list((REPO / "src" / "agentkeep").rglob("*.py")))
    # __all__ is read with ast, not imported: it must agree with the imported package.
    assert f"\n{len(agentkeep.__all__)} names\n" in out
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"{len(readme.split())} words, {len(readme.splitlines())} lines" in out
    assert re.search(r"^src/: \d+ §, \d+ seed 00x", out, flags=re.M)
    assert re.search(r"^Transaction: \d+ members", out, flags=re.M)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / "src" / "agentkeep" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_lazy_and_type_checking_imports_close_a_cycle(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "__init__.py": '__all__ = ["a", "b"]\n',
            "loop/__init__.py": "",
            "loop/a.py": "from agentkeep.loop import b\n",
            "loop/b.py": "def later() -> None:\n    from . import c\n",
            "loop/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from agentkeep.loop.a import X\n"
            ),
            "tools.py": "from agentkeep import _tool_x\n",
            "_tool_x.py": "import agentkeep.tools\n",
            "errors.py": "",
        },
    )
    out = run(tmp_path)
    assert "2 cycles: 2 inside one package, 0 across packages" in out
    assert "loop: 3 modules: agentkeep.loop.a, agentkeep.loop.b, agentkeep.loop.c" in out
    assert "(top level): 2 modules: agentkeep._tool_x, agentkeep.tools" in out
    assert "3 files, 1 private" in out
    assert "\n2 names\n" in out
    assert "no persistence/interface.py" in out


def test_a_composed_transaction_is_counted_per_object(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "__init__.py": "__all__: list[str] = []\n",
            "persistence/__init__.py": "",
            "persistence/queue.py": (
                "class QueueStatements:\n"
                "    def enqueue(self) -> None: ...\n"
                "    def dequeue(self) -> None: ...\n"
            ),
            "persistence/interface.py": (
                "from typing import Protocol\n"
                "from agentkeep.persistence.queue import QueueStatements\n"
                "class KvStatements(Protocol):\n"
                "    def read(self) -> None: ...\n"
                "class Transaction(Protocol):\n"
                "    queue: QueueStatements\n"
                "    @property\n"
                "    def kv(self) -> KvStatements: ...\n"
                "    @property\n"
                "    def active(self) -> bool: ...\n"
                "    def after_commit(self) -> None: ...\n"
            ),
        },
    )
    out = run(tmp_path)
    assert "Transaction: 4 members (2 of its own, 2 objects)" in out
    assert "tx.kv: KvStatements, 1 members" in out
    assert "tx.queue: QueueStatements, 2 members" in out
    assert "total statements and properties across the objects: 5" in out
