"""The direction of dependencies that ARCHITECTURE.md states, checked on every module's imports.

Each package may import only the packages listed for it (and the standard
library and third-party packages not named in FORBIDDEN_THIRD_PARTY). The
arrows point inward: the controller (harness) uses everything; workloads and
nemeses act through clusters and record into history; checkers read
histories and know nothing of brokers, SSH or AMQP; reports read what a run
stored and know nothing of the clients, faults or clusters that made it;
history depends on nothing of the project.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("history", "clusters", "workloads", "nemesis", "checkers", "reports", "harness",
           "bench")

ALLOWED: dict[str, set[str]] = {
    "history": set(),
    "clusters": {"history"},  # history.files, the atomic write; never the op model
    "workloads": {"clusters", "history"},
    "nemesis": {"clusters", "history"},
    "checkers": {"history"},
    # Pages and pictures from the store: a stored run is reported without the code that ran it.
    "reports": {"history", "checkers"},
    "harness": {"history", "clusters", "workloads", "nemesis", "checkers", "reports"},
    "bench": {"history", "clusters", "workloads", "checkers", "harness"},
}
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "checkers": {"pika", "paramiko", "docker"},
    "reports": {"pika", "paramiko", "docker", "pyspark"},
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


def module_graph() -> dict[str, set[str]]:
    """Returns each project module's project imports (those under TYPE_CHECKING too), by dotted
    name. `from pkg import mod` depends on the module, not on the package's __init__."""
    modules: dict[str, Path] = {}
    for package in PROJECT:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps |= {m for a in node.names if (m := owner(a.name))}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
                deps |= subs
                if len(subs) < len(node.names) and (m := owner(node.module)):
                    deps.add(m)
        graph[name] = deps - {name}
    return graph


def test_reports_reach_no_workload_nemesis_or_cluster_module_even_through_another():
    # A report reads test.json, results.json, the history and the node logs; what a queue kind
    # or a fault would say of itself, the run wrote into test.json when it ran.
    graph = module_graph()
    reached, todo = set(), [m for m in graph if m.split(".")[0] == "reports"]
    while todo:
        for dep in graph[todo.pop()] - reached:
            reached.add(dep)
            todo.append(dep)
    wrong = sorted(m for m in reached if m.split(".")[0] in ("workloads", "nemesis", "clusters"))
    assert not wrong, "reports/ reaches " + ", ".join(wrong)


def test_no_module_imports_itself_round_a_circle():
    graph = module_graph()
    circles = []
    for start in sorted(graph):
        seen, todo = set(), [(start, (start,))]
        while todo:
            name, path = todo.pop()
            for dep in graph[name]:
                if dep == start:
                    circles.append(" -> ".join((*path, start)))
                elif dep not in seen and dep > start:  # each circle once, from its least module
                    seen.add(dep)
                    todo.append((dep, (*path, dep)))
    assert not circles, "import circles (TYPE_CHECKING imports count): " + "; ".join(circles)


def kind_name_tests(path: Path, names: set[str]) -> list[int]:
    """Takes a Python file and the queue kinds' names. Returns the lines where it compares
    something with a kind's name (==, !=, in, not in, a match case)."""
    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(named(e) for e in node.elts)
        return False

    def tests(node: ast.AST) -> bool:
        if isinstance(node, ast.Compare):
            return any(named(c) for c in (node.left, *node.comparators))
        return isinstance(node, ast.MatchValue) and named(node.value)

    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.lineno for node in ast.walk(tree) if tests(node)]


def test_only_the_queue_kinds_test_a_queue_kinds_name():
    # Everything else asks the kind (workloads.kinds.kind_of): what it declares, validates,
    # reads, proves or shows. The CLI's choices and the scenario catalogue name kinds but
    # compare nothing.
    from workloads.kinds import KINDS

    kinds_dir = ROOT / "workloads" / "kinds"
    wrong = []
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if kinds_dir in path.parents:
                continue
            wrong += [f"{path.relative_to(ROOT)}:{n}" for n in kind_name_tests(path, set(KINDS))]
    assert not wrong, "queue kind names tested outside workloads/kinds/: " + ", ".join(wrong)
