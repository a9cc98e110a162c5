"""The direction of dependencies that ARCHITECTURE.md states, checked on every module's imports.

Each package may import only the packages listed for it (and the standard
library and third-party packages not named in FORBIDDEN_THIRD_PARTY). The
arrows point inward: the controller (harness) uses everything; workloads and
nemeses act through clusters and record into history; checkers read
histories and know nothing of brokers, SSH or AMQP; history depends on
nothing of the project.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("history", "clusters", "workloads", "nemesis", "checkers", "harness", "bench")

ALLOWED: dict[str, set[str]] = {
    "history": set(),
    "clusters": set(),
    "workloads": {"clusters", "history"},
    "nemesis": {"clusters", "history"},
    "checkers": {"history"},
    "harness": {"history", "clusters", "workloads", "nemesis", "checkers"},
    "bench": {"history", "clusters", "workloads", "checkers", "harness"},
}
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "checkers": {"pika", "paramiko", "docker"},
    "history": {"pika", "paramiko", "docker", "pyspark"},
    "nemesis": {"pika", "pyspark"},
    "workloads": {"paramiko", "docker", "pyspark"},
    "clusters": {"pika", "pyspark"},
}


def imports(path: Path) -> set[str]:
    """Takes a Python file. Returns the top-level names of every module it imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_package_is_listed():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {"tests"}
    assert packages == set(PROJECT), "add the new package to ALLOWED and to ARCHITECTURE.md"


@pytest.mark.parametrize("package", PROJECT)
def test_imports_follow_the_stated_direction(package):
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        names = imports(path)
        against = (names & set(PROJECT)) - ALLOWED[package] - {package}
        against |= names & FORBIDDEN_THIRD_PARTY.get(package, set())
        if against:
            wrong.append(f"{path.relative_to(ROOT)} imports {', '.join(sorted(against))}")
    assert not wrong, f"{package}/ imports against ARCHITECTURE.md: " + "; ".join(wrong)
