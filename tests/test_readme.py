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


def test_every_readme_table_runs_unbroken_with_as_many_cells_in_each_row():
    text = README.read_text(encoding="utf-8")
    found = tables(text)
    assert len(found) >= 9
    lines = text.splitlines()
    for at, rows in found:
        end = at + len(rows) - 1  # the index of the line after the table
        after = lines[end] if end < len(lines) else ""
        # A table ends at a blank line, a list or prose: never at a line that a table row
        # follows again (output pasted into the table's middle).
        resumes = any(x.startswith("|") for x in lines[end + 1:end + 3])
        assert not (after.strip() and resumes), f"README.md:{end + 1} breaks the table of line {at}: {after[:80]!r}"
        width = _cells(rows[0])
        bad = [(at + k, _cells(r)) for k, r in enumerate(rows) if _cells(r) != width]
        assert not bad, f"README.md table at line {at}: rows of another width than its {width} cells: {bad[:5]}"


def test_a_line_pasted_into_a_table_is_caught():
    text = "| a | b |\n|---|---|\n| 1 | 2 |\narchived 3 run(s)\n| 3 | 4 |\n"
    [(at, rows)] = [t for t in tables(text)]
    assert len(rows) == 3
    lines = text.splitlines()
    assert any(x.startswith("|") for x in lines[at + len(rows):at + len(rows) + 2])
