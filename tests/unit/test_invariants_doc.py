"""``docs/invariants.md`` stays true: every module and test it cites exists, its promises are
numbered I1, I2, … without a gap, and its table maps each of the base specification's 25
invariants to exactly one of them (code cites "invariant I7", so a stale row
would send a reader nowhere)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "invariants.md"
PACKAGE = REPO / "src" / "agentkeep"


def rows() -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| I")
    ]


def test_the_promises_are_numbered_without_a_gap() -> None:
    numbers = [row[0] for row in rows()]
    assert len(numbers) >= 30
    assert numbers == [f"I{n}" for n in range(1, len(numbers) + 1)]
    for row in rows():
        assert len(row) == 4, row  # number, promise, enforced in, tested by
        assert re.search(r"`[a-z_/]+\.py`", row[2]), f"{row[0]} names no module"
        assert "tests/" in row[3], f"{row[0]} names no test"


def test_every_cited_module_and_test_exists() -> None:
    cited = 0
    for row in rows():
        for module in re.findall(r"`([a-z_/]+\.py)`", row[2]):
            assert (PACKAGE / module).is_file(), f"{row[0]}: src/agentkeep/{module} is gone"
            cited += 1
        last: Path | None = None
        # `tests/x.py`, `tests/x.py::name`, or `::name` (another test of the file before it).
        for found in re.finditer(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`", row[3]):
            path, name = found.groups()
            if path:
                last = REPO / path
                assert last.exists(), f"{row[0]}: {path} is gone"
                cited += 1
            if name:
                assert last is not None, f"{row[0]}: ::{name} follows no file"
                source = last.read_text(encoding="utf-8")
                assert re.search(rf"def {name}\(", source), f"{row[0]}: {name} not in {last}"
    assert cited > 60


def test_the_table_maps_every_spec_invariant_to_one_of_ours() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Where the numbers come from", 1)[1]
    ours = {row[0] for row in rows()}
    mapped: dict[int, str] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for left, right in itertools.pairwise(cells):
            if left.isdigit() and re.fullmatch(r"I\d+", right):
                assert int(left) not in mapped, f"spec {left} mapped twice"
                assert right in ours, f"spec {left} maps to {right}, which is not a promise"
                mapped[int(left)] = right
    assert set(mapped) == set(range(1, 26))
