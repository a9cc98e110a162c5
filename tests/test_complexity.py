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
