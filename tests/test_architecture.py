"""The house's shape, checked: imports follow ARCHITECTURE.md's table, no import circle, modules and functions small.

The allowed arrows are read from the "may import" column of ARCHITECTURE.md's package table (the one place they are
written): a module belongs to the row with the longest matching name and may import the standard library, its own
row's package, and what that row lists. Every import counts, at module level or inside a function (a lazy import
is still an arrow), except those under ``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("mutexmatch", "orchestration", "reports")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


@lru_cache(maxsize=None)
def imports_of(module: str) -> frozenset[str]:
    """Every module ``module`` imports; ``from pkg import name`` counts as ``pkg.name`` where that is a module."""
    path = modules()[module]
    tree = ast.parse(path.read_text(), str(path))
    skipped, found = _type_checking_nodes(tree), set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node, path.name == "__init__.py")
            subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules()]
            found.update(subs if len(subs) == len(node.names) else [source, *subs])
    found.discard("__future__")
    return frozenset(found)


@lru_cache(maxsize=None)
def allowed_table() -> dict[str, tuple[str, ...]]:
    """ARCHITECTURE.md's package table: row name → what it may import (the backticked names of its last column)."""
    table = {}
    for line in (REPO / "ARCHITECTURE.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (m := re.fullmatch(r"`([\w./]+?)/?`", cells[0])):
            table[m.group(1).replace("/", ".")] = tuple(re.findall(r"`([\w.]+)`", cells[-1]))
    assert {"mutexmatch", "orchestration", "orchestration.contract", "reports"} <= set(table), f"package table not found: {sorted(table)}"
    return table


def _row(module: str) -> str:
    return max((r for r in allowed_table() if module == r or module.startswith(r + ".")), key=len)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _forbidden(module: str) -> list[str]:
    row = _row(module)
    allowed = (row, *allowed_table()[row])
    bad = []
    for name in sorted(imports_of(module)):
        if name.split(".")[0] in sys.stdlib_module_names:
            continue
        if not any(_within(name, a) for a in allowed):
            bad.append(name)
    return bad


@pytest.mark.parametrize("module", sorted(modules()))
def test_imports_follow_the_architecture_table(module: str) -> None:
    bad = _forbidden(module)
    assert not bad, (f"{module} (row `{_row(module)}` of ARCHITECTURE.md) imports {bad}; it may import "
                     f"{list(allowed_table()[_row(module)])}, its own package and the standard library")


def _cycles(graph: dict[str, list[str]] | None = None) -> list[list[str]]:
    """Strongly connected components (Tarjan) of more than one node in ``graph``, by default the graph of the
    project's own modules."""
    if graph is None:
        graph = {m: sorted(i for i in imports_of(m) if i in modules() and i != m) for m in modules()}
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    assert _cycles() == []


def _subpackage(module: str) -> str | None:
    """``orchestration.launch`` for ``orchestration.launch.phases``; None for a module at a package's top."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and ".".join(parts[:2]) in modules() and \
        modules()[".".join(parts[:2])].name == "__init__.py" else None


def test_subpackages_import_one_way() -> None:
    """The subfolders of a package (``orchestration/launch/``, ``trial/``, ``store/``, ...) form no circle either:
    their arrows run one way, as ARCHITECTURE.md draws them."""
    graph: dict[str, set[str]] = {}
    for m in modules():
        if (s := _subpackage(m)) is not None:
            graph.setdefault(s, set()).update(t for i in imports_of(m) if (t := _subpackage(i)) not in (None, s))
    assert {"orchestration.launch", "orchestration.trial", "orchestration.spec"} <= set(graph)
    assert _cycles({k: sorted(v) for k, v in graph.items()}) == []


def test_the_checker_sees_a_circle_and_a_forbidden_arrow(monkeypatch) -> None:
    """The checks above can fail: a planted circle and a planted arrow are found."""
    fake = {"mutexmatch.a": frozenset({"mutexmatch.b"}), "mutexmatch.b": frozenset({"mutexmatch.a", "mlflow"})}
    real = modules()
    monkeypatch.setitem(globals(), "modules", lambda: {**real, "mutexmatch.a": None, "mutexmatch.b": None})
    monkeypatch.setitem(globals(), "imports_of", lambda m: fake.get(m, frozenset()))
    assert ["mutexmatch.a", "mutexmatch.b"] in _cycles()
    assert _forbidden("mutexmatch.b") == ["mlflow"]


@pytest.mark.parametrize("module", sorted(modules()))
def test_modules_and_functions_stay_small(module: str) -> None:
    path = modules()[module]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path.relative_to(REPO)}: {text.count(chr(10))} lines"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines, line {n.lineno})" for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(REPO)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_contract_row_names_the_trainer_modules_the_contract_declares() -> None:
    """The contract's reach into the trainer is written twice on purpose (the table a person reads, the tuple the
    report tests load-check): they must agree."""
    from orchestration.contract import TRAINER_MODULES

    row = [m for m in allowed_table()["orchestration.contract"] if m.startswith("mutexmatch")]
    assert sorted(row) == sorted(TRAINER_MODULES)
