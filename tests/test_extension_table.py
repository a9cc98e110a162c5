"""ARCHITECTURE.md's "Where each kind of extension goes" table, checked against the tree: every
file it names exists, and every registry it names ("`path` `NAME`") is defined in that file, so
the table cannot drift from the code a newcomer would change."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKED = re.compile(r"`([^`]+)`")


def _rows() -> list[list[str]]:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Where each kind of extension goes", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| to add")]
    return [r for r in rows if len(r) == 3]


def _paths(cell: str) -> list[str]:
    return [t for t in TICKED.findall(cell)
            if "/" in t and "<" not in t and re.fullmatch(r"[\w./]+", t)
            and (t.endswith(".py") or t.endswith("/"))]


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return True
    return False


def test_the_table_has_its_rows():
    kinds = [r[0] for r in _rows()]
    assert len(kinds) >= 10 and {"a fault", "a backend", "a command-line option"} <= set(kinds)


def test_every_file_the_table_names_exists():
    missing = [f"{row[0]}: {p}" for row in _rows() for cell in row for p in _paths(cell)
               if not (ROOT / p).exists()]
    assert missing == []


def test_every_registry_the_table_names_is_defined_where_it_says():
    wrong = []
    for row in _rows():
        ticks = TICKED.findall(row[2])
        for path, name in itertools.pairwise(ticks):
            if (path.endswith(".py") and re.fullmatch(r"[A-Z_]+", name)
                    and not _defines(ROOT / path, name)):
                wrong.append(f"{row[0]}: {name} in {path}")
    assert wrong == []
