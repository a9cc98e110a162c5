"""Plain Markdown from plain data: text escaped, inline code, tables, fenced code and quotes.

What a Markdown page (reports.finding) says comes from the run: node names,
broker log lines, texts results.json carries. None of it may turn into markup
(a Mnesia line's "** ERROR **" into bold, "<0.1592.0>" into an HTML tag, a
"|" into a table's column), so every piece of run text passes through
`text` (backslash escapes, which CommonMark renders as the characters
themselves) or `code`/`fence` (verbatim). The output holds no HTML.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# ASCII punctuation that could start markup anywhere in a line (CommonMark's backslash escapes
# render each of these as itself). "_" is left alone: CommonMark never emphasises inside a word,
# and ids such as unflagged_after_ack stay readable.
_SPECIAL = re.compile(r"([\\`*<>\[\]|])")
_BLANKS = re.compile(r"\s+")


def text(x: object) -> str:
    """Takes anything. Returns it as one line of Markdown text that renders as written: blanks
    (newlines included) folded to one space, markup characters escaped."""
    return _SPECIAL.sub(r"\\\1", _BLANKS.sub(" ", str(x)).strip())


def code(x: object) -> str:
    """Takes anything. Returns it as inline code on one line, fenced by more backticks than it
    holds in a row."""
    s = _BLANKS.sub(" ", str(x)).strip()
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Takes column headers and rows of cells already in Markdown (escaped with `text` or made
    with `code`). Returns the table's lines; an empty cell is written "-" so no row collapses."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c if c.strip() else "-" for c in cells) + " |"
    return [line(headers), "|" + "|".join("---" for _ in headers) + "|",
            *(line(r) for r in rows)]


def fence(lines: Iterable[str], info: str = "") -> list[str]:
    """Takes lines of verbatim text and an info string ("toml"). Returns a fenced code block,
    its fence longer than any run of backticks in the text."""
    body = [str(x).rstrip("\n") for x in lines]
    longest = max((len(m) for x in body for m in re.findall(r"`{3,}", x)), default=2)
    ticks = "`" * max(3, longest + 1)
    return [f"{ticks}{info}", *body, ticks]


def quote(paragraph: object) -> list[str]:
    """Takes a paragraph. Returns it as a block quote (one line, escaped)."""
    return [f"> {text(paragraph)}"]
