"""No function past ruff's complexity limit (C90, `max-complexity` in pyproject.toml), tests
included: checked here too because CI runs `make test`, not `make lint`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_function_is_past_the_complexity_limit() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "C90",
                           "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


MAX_LINES = 60  # issue 22: where a newcomer starts, no function longer than a screen


def _long_functions() -> list[str]:
    import ast
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=True).stdout.split()
    found = []
    for name in listed:
        if name.startswith("tests/"):
            continue
        tree = ast.parse((ROOT / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_LINES:
                    found.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_of_the_code_is_longer_than_sixty_lines() -> None:
    assert _long_functions() == []
