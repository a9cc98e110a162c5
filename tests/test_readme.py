"""README.md's tables are tables: the ones rebuilt from the archives (harness table) are pasted
in by hand, and a line of other output pasted with them ends the table where it stands."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def _cells(line: str) -> int:
    """Takes a table line. Returns its number of cells (a `\\|` or a `|` in a code span is
    not a border)."""
    text = re.sub(r"`[^`]*`", "", line.replace("\\|", ""))
    return text.strip().strip("|").count("|") + 1


def tables(text: str) -> list[tuple[int, list[str]]]:
    """Takes Markdown. Returns each table as (line number of its header, its lines up to the
    first line that is not a table row)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if SEPARATOR.match(line) and i > 0 and lines[i - 1].startswith("|"):
            rows = [lines[i - 1], line]
            for later in lines[i + 1:]:
                if not later.startswith("|"):
                    break
                rows.append(later)
            out.append((i, rows))
    return out


def problems(text: str) -> list[str]:
    """Takes Markdown. Returns what breaks its tables: a line that ends a table which table
    rows follow again (output pasted into its middle), and rows of another width than the
    header's."""
    lines = text.splitlines()
    out = []
    for at, rows in tables(text):
        end = at + len(rows) - 1  # the index of the line after the table
        after = lines[end] if end < len(lines) else ""
        if after.strip() and any(x.startswith("|") for x in lines[end + 1:end + 3]):
            out.append(f"README.md:{end + 1} breaks the table of line {at}: {after[:80]!r}")
        width = _cells(rows[0])
        bad = [(at + k, _cells(r)) for k, r in enumerate(rows) if _cells(r) != width]
        if bad:
            out.append(f"README.md table at line {at}: rows of another width than its "
                       f"{width} cells: {bad[:5]}")
    return out


def test_every_readme_table_runs_unbroken_with_as_many_cells_in_each_row():
    text = README.read_text(encoding="utf-8")
    assert len(tables(text)) >= 9
    assert problems(text) == []


def test_a_line_pasted_into_a_table_or_a_short_row_is_caught():
    pasted = "| a | b |\n|---|---|\n| 1 | 2 |\narchived 3 run(s)\n| 3 | 4 |\n"
    assert problems(pasted) == ["README.md:4 breaks the table of line 1: 'archived 3 run(s)'"]
    short = "| a | b |\n|---|---|\n| 1 |\n\nprose\n"
    assert problems(short) == ["README.md table at line 1: rows of another width than its "
                               "2 cells: [(3, 1)]"]
    whole = "| a | b |\n|---|---|\n| `x|y` | 2 |\n\n| 3 | 4 |\n"
    assert problems(whole) == []
