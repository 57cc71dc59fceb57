#!/usr/bin/env python3
"""How easy the house is to find one's way around in: the figures issue 30 measures.

Run it on a checkout (the argument is the repository root, default ``.``)::

    python3 scripts/house_metrics.py [ROOT]

It reads the tree only (``ast`` and text; nothing of ``agentkeep`` is imported, so it runs on
any old commit, e.g. in a ``git worktree``) and prints one section per figure:

- modules and lines by package under ``src/agentkeep`` (top-level files are ``(top level)``);
- the top-level files, and how many are private (``_name.py``);
- the import cycles: the strongly connected components of the module import graph, by the
  package they lie in. Every import counts, as in ``tests/unit/test_layering.py``: module
  level, lazy (inside a function) and under ``if TYPE_CHECKING:``;
- the largest module (lines) and the largest function (lines, decorators included);
- ``len(agentkeep.__all__)``, read from ``__init__.py`` with ``ast``;
- the members of the ``Transaction`` protocol (``persistence/interface.py``), and of each
  object it is composed of when a member's type is another class of ``persistence/``;
- the README's words and lines;
- the ``§`` and ``seed 00x`` references in ``src/`` and ``docs/``, and what they point at.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

PACKAGE = "agentkeep"
TOP = "(top level)"


# -- the modules -----------------------------------------------------------------------------


def source_modules(src: Path) -> dict[str, Path]:
    """Every module under ``src/agentkeep`` by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def package_of(module: str, path: Path) -> str:
    """The first-level package a module lies in, or ``(top level)`` for a top-level file."""
    parts = module.split(".")
    if len(parts) >= 3 or (len(parts) == 2 and path.name == "__init__.py"):
        return parts[1]
    return TOP


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


# -- the import graph (the idea of tests/unit/test_layering.py's imports_of) ------------------


def imports_of(tree: ast.AST, module: str, *, is_package: bool, known: set[str]) -> set[str]:
    """Every ``agentkeep`` module ``tree`` imports, wherever the statement sits.

    ``from pkg import name`` counts as ``pkg.name`` when that is a module, else as ``pkg``;
    relative imports are resolved against ``module``.
    """
    found: set[str] = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known and m != module}


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: every component, each sorted, in no particular order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


# -- the sections ----------------------------------------------------------------------------


def section(title: str) -> None:
    print(f"\n## {title}")


def modules_and_lines(modules: Mapping[str, Path], lines: Mapping[str, int]) -> None:
    section("modules and lines by package")
    count: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for module, path in modules.items():
        package = package_of(module, path)
        count[package] += 1
        total[package] += lines[module]
    for package in sorted(count, key=lambda p: (-total[p], p)):
        print(f"{package:<16} {count[package]:>4} modules {total[package]:>7} lines")
    print(f"{'total':<16} {sum(count.values()):>4} modules {sum(total.values()):>7} lines")


def top_level_files(modules: Mapping[str, Path]) -> None:
    section("top-level files")
    files = sorted(
        path.name
        for module, path in modules.items()
        if package_of(module, path) == TOP and path.name != "__init__.py"
    )
    private = [name for name in files if name.startswith("_")]
    print(f"{len(files)} files, {len(private)} private")
    print("  " + " ".join(files))


def import_cycles(modules: Mapping[str, Path], trees: Mapping[str, ast.AST]) -> None:
    section("import cycles (strongly connected components; lazy and TYPE_CHECKING imports count)")
    known = set(modules)
    graph = {
        module: imports_of(
            trees[module], module, is_package=path.name == "__init__.py", known=known
        )
        for module, path in modules.items()
    }
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    inside: dict[str, list[list[str]]] = defaultdict(list)
    across: list[list[str]] = []
    for cycle in cycles:
        packages = {package_of(m, modules[m]) for m in cycle}
        if len(packages) == 1:
            inside[packages.pop()].append(cycle)
        else:
            across.append(cycle)
    n_inside = sum(len(v) for v in inside.values())
    print(f"{len(cycles)} cycles: {n_inside} inside one package, {len(across)} across packages")
    for package in sorted(inside):
        for cycle in sorted(inside[package], key=lambda c: (-len(c), c)):
            print(f"  {package}: {len(cycle)} modules: {', '.join(cycle)}")
    for cycle in sorted(across, key=lambda c: (-len(c), c)):
        print(f"  across: {len(cycle)} modules: {', '.join(cycle)}")
    if cycles:
        largest = max(cycles, key=len)
        print(f"largest: {len(largest)} modules")


def largest(
    modules: Mapping[str, Path], lines: Mapping[str, int], trees: Mapping[str, ast.AST]
) -> None:
    section("largest module and function")
    for module in sorted(lines, key=lambda m: (-lines[m], m))[:3]:
        print(f"module   {lines[module]:>5} lines  {module}")
    functions: list[tuple[int, str]] = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                end = node.end_lineno or node.lineno
                functions.append((end - start + 1, f"{module}:{node.lineno} {node.name}"))
    for size, where in sorted(functions, key=lambda f: (-f[0], f[1]))[:3]:
        print(f"function {size:>5} lines  {where}")


def all_size(src: Path) -> None:
    section("agentkeep.__all__")
    tree = ast.parse((src / PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    names: list[str] | None = None
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert value is not None
            names = [str(v) for v in ast.literal_eval(value)]
    print(f"{len(names)} names" if names is not None else "no __all__")


def class_members(node: ast.ClassDef) -> tuple[list[str], dict[str, str]]:
    """A class body's members (methods, properties, annotated attributes) and, for each, the
    name its type annotation (or a property's return annotation) mentions last."""
    members: list[str] = []
    types: dict[str, str] = {}
    for item in node.body:
        annotation: ast.expr | None = None
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if item.name.startswith("__") and item.name.endswith("__"):
                continue
            members.append(item.name)
            decorators = {ast.unparse(d) for d in item.decorator_list}
            if "property" in decorators or "functools.cached_property" in decorators:
                annotation = item.returns
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.append(item.target.id)
            annotation = item.annotation
        if annotation is not None:
            mentioned = [n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)]
            mentioned += [n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)]
            for name in mentioned:
                types[members[-1]] = name
    return members, types


def transaction(src: Path) -> None:
    section("Transaction protocol members")
    persistence = src / PACKAGE / "persistence"
    interface = persistence / "interface.py"
    if not interface.is_file():
        print("no persistence/interface.py")
        return
    classes: dict[str, ast.ClassDef] = {}
    for path in sorted(persistence.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    # The interface module's own classes win over a same-named class elsewhere.
    for node in ast.walk(ast.parse(interface.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
    if "Transaction" not in classes:
        print("no class Transaction")
        return
    members, types = class_members(classes["Transaction"])
    parts = {
        member: name
        for member, name in types.items()
        if name in classes and name != "Transaction" and class_members(classes[name])[0]
    }
    own = [m for m in members if m not in parts]
    total = len(own)
    print(f"Transaction: {len(members)} members ({len(own)} of its own, {len(parts)} objects)")
    for member, name in sorted(parts.items()):
        count = len(class_members(classes[name])[0])
        total += count
        print(f"  tx.{member}: {name}, {count} members")
    if parts:
        print(f"total statements and properties across the objects: {total}")


def readme(root: Path) -> None:
    section("README")
    path = root / "README.md"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    print(f"{len(text.split())} words, {len(text.splitlines())} lines")


SECTION_REF = re.compile(r"§\s*([0-9]+(?:\.[0-9]+)*)?")
SEED_REF = re.compile(r"seed 00(\d)", re.IGNORECASE)
BARE_INVARIANT = re.compile(r"\binvariants? \d+")
# A § points at SURFACES.md when that name comes shortly before it on the same line; any other
# § is the happy-agent base spec's (the only other numbered document the code cites).
SURFACES_BEFORE = re.compile(r"SURFACES(?:\.md)?`?\s*(?:§[0-9.]+\s*(?:[,;–-]|and)?\s*)*$")


def text_files(root: Path, folder: str) -> Iterator[Path]:
    for path in sorted((root / folder).rglob("*")):
        if path.is_file() and path.suffix in {".py", ".md", ".toml", ".json", ".txt"}:
            yield path


def references(root: Path) -> None:
    section("§ and seed 00x references in src/ and docs/")
    documents: Counter[str] = Counter()
    invariants: Counter[str] = Counter()
    seed_numbers: Counter[str] = Counter()
    for folder in ("src", "docs"):
        sections = seeds = files = bare = 0
        for path in text_files(root, folder):
            text = path.read_text(encoding="utf-8")
            bare += len(BARE_INVARIANT.findall(text))
            here = text.count("§")
            found = SEED_REF.findall(text)
            sections += here
            seeds += len(found)
            files += bool(here or found)
            seed_numbers.update(f"seed 00{n}" for n in found)
            for line in text.splitlines():
                for match in SECTION_REF.finditer(line):
                    number = match.group(1) or ""
                    if SURFACES_BEFORE.search(line[: match.start()][-40:]):
                        documents["SURFACES.md"] += 1
                    else:
                        chapter = number.split(".")[0] or "?"
                        documents[f"spec §{chapter}"] += 1
                        if chapter == "7":
                            invariants[number] += 1
        print(f"{folder}/: {sections} §, {seeds} seed 00x, in {files} files", end="")
        print(f"; {bare} 'invariant N' (the spec's numbers without §)")
    print("§ point at: " + ", ".join(f"{d} {n}" for d, n in sorted(documents.items())))
    print(
        "spec §7 (invariants) cited: "
        + ", ".join(f"§{k or '7'} {n}" for k, n in sorted(invariants.items(), key=_numeric))
    )
    print("seed references: " + ", ".join(f"{s} {n}" for s, n in sorted(seed_numbers.items())))


def _numeric(item: tuple[str, int]) -> tuple[int, ...]:
    return tuple(int(p) for p in item[0].split(".") if p)


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".").resolve()
    src = root / "src"
    if not (src / PACKAGE / "__init__.py").is_file():
        print(f"{root} has no src/{PACKAGE}", file=sys.stderr)
        return 2
    modules = source_modules(src)
    lines = {module: line_count(path) for module, path in modules.items()}
    trees = {
        module: ast.parse(path.read_text(encoding="utf-8")) for module, path in modules.items()
    }
    print(f"# house metrics of {root}")
    modules_and_lines(modules, lines)
    top_level_files(modules)
    import_cycles(modules, trees)
    largest(modules, lines, trees)
    all_size(src)
    transaction(src)
    readme(root)
    references(root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
