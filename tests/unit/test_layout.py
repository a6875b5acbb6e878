"""The package layout follows the data flow: imports run one way and nothing imports in a cycle.

Read from the modules' own source (every ``import`` and ``from ... import``, at module level or
inside functions, ``__getattr__`` included), so the rule holds for lazy imports too and has no
exceptions: no alias module, no deprecated name resolved on first access. Imports under
``if TYPE_CHECKING:`` run only for type checkers: they count for the direction rule, not for
cycles. See docs/architecture.md for the stages and where each kind of change goes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "metaprov"

#: Rank of each top-level part of the package: a module may import only parts of the same or a
#: lower rank (cli -> pipelines -> queries -> store -> write/analysis -> mapping -> link -> ingest
#: -> records/errors/timeutil).
RANKS = {
    "_version": 0,
    "_callable": 0,
    "errors": 0,
    "timeutil": 0,
    "records": 0,
    "redact": 0,
    "hostlist": 0,
    "ingest": 1,
    "link": 2,
    "mapping": 3,
    "write": 4,
    "analysis": 4,
    "store": 5,
    "queries": 6,
    "export": 7,
    "validate": 7,
    "crate": 7,
    "report": 7,
    "capture": 7,
    "compare": 7,
    "synthetic": 7,
    "live": 7,
    "cli": 8,
    "__main__": 8,
    "": 9,  # metaprov/__init__.py: the public API, imports any stage lazily
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, name: str, known: set[str]) -> list[tuple[str, bool]]:
    """(imported metaprov module, only for type checking) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def target(mod: str, names: list[str]) -> list[str]:
        out = []
        for n in names:
            full = f"{mod}.{n}"
            out.append(full if full in known else mod)
        return out or [mod]

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "metaprov":
                    found.append((a.name, typing_only))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            if mod.split(".")[0] == "metaprov":
                for t in target(mod, [a.name for a in node.names]):
                    found.append((t, typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return found


def _graph() -> tuple[nx.DiGraph, dict[str, list[tuple[str, bool]]]]:
    mods = _modules()
    known = set(mods)
    edges = {m: _imports(p, m, known) for m, p in mods.items()}
    g = nx.DiGraph()
    g.add_nodes_from(known)
    for m, targets in edges.items():
        for t, typing_only in targets:
            if not typing_only and t != m:
                g.add_edge(m, t)
    return g, edges


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_part_of_the_package_has_a_rank() -> None:
    parts = {_part(m) for m in _modules()}
    assert parts <= set(RANKS), (
        f"add these to RANKS (and docs/architecture.md): {parts - set(RANKS)}"
    )


def test_no_import_cycles() -> None:
    g, _ = _graph()
    cycles = [c for c in nx.simple_cycles(g) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_imports_run_down_the_data_flow() -> None:
    _, edges = _graph()
    upward = []
    for m, targets in edges.items():
        for t, _typing in targets:
            if t in RANKS or _part(t) not in RANKS:
                continue
            if RANKS[_part(t)] > RANKS[_part(m)]:
                upward.append(f"{m} -> {t}")
    assert not upward, "imports against the data flow:\n" + "\n".join(sorted(upward))


def test_no_stage_imports_the_generators() -> None:
    _, edges = _graph()
    users = sorted(
        f"{m} -> {t}"
        for m, targets in edges.items()
        for t, _ in targets
        if _part(t) == "synthetic" and _part(m) != "synthetic"
    )
    assert not users, "the synthetic generators are for tests and benchmarks only:\n" + "\n".join(
        users
    )


def test_only_the_cli_imports_click() -> None:
    offenders = []
    for m, p in _modules().items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "click" for n in names) and m != "metaprov.cli":
                offenders.append(m)
    assert not offenders, f"click belongs to metaprov.cli only: {offenders}"


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    # The rules above must be able to fail: a store module importing a question is caught.
    src = "def f():\n    from metaprov.queries import run_question\n"
    p = tmp_path / "x.py"
    p.write_text(src, encoding="utf-8")
    found = _imports(p, "metaprov.store.x", set(_modules()))
    assert found == [("metaprov.queries", False)]
    assert RANKS[_part(found[0][0])] > RANKS[_part("metaprov.store.x")]
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from metaprov.store import Store\n"
    p.write_text(typed, encoding="utf-8")
    assert _imports(p, "metaprov.analysis.x", set(_modules())) == [("metaprov.store", True)]


def test_the_checker_reads_lazy_imports_in_getattr(tmp_path: Path) -> None:
    # A lazily resolved name is an import like any other: a store that hands out a question through
    # its module __getattr__ is an upward import (the 0.2 alias store.query was one, and a cycle).
    src = "def __getattr__(name):\n    from metaprov.queries import query\n    return query\n"
    p = tmp_path / "x.py"
    p.write_text(src, encoding="utf-8")
    assert _imports(p, "metaprov.store.x", set(_modules())) == [("metaprov.queries", False)]


@pytest.mark.parametrize(
    "old",
    ["metaprov.critical_path", "metaprov.ingest.darshan_write", "metaprov.queries.sparql"],
)
def test_the_02_aliases_are_gone(old: str) -> None:
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_store_does_not_hand_out_questions() -> None:
    import metaprov.store

    assert not hasattr(metaprov.store, "query")
