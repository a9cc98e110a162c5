"""The one way reports/ makes HTML: Jinja2 templates with autoescaping, fed plain data.

Every page is a template in reports/templates/ extending `base.html.j2`; Python
prepares plain data (strings, numbers, the `Cell` and `Table` records below)
and `render` fills a template with it. Autoescaping is on for every template
and nothing here marks a string safe: a node name, a queue name or a broker
log line reaches the page as text, whatever it holds. Tables are data too
(`table` builds a `Table` of `Cell`s; the `table` macro of `macros.html.j2`
draws it), so no piece of HTML is ever handed from Python to a template.

Templates are written readably, indented, and `Compact` joins their lines when
they are loaded: a line break beside a tag or a Jinja delimiter is dropped, a
line break between two words becomes one space. The pages come out as compact
as hand-joined strings, and a template's layout never adds a gap between
inline elements. Only the template source is touched, never the data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension

from reports.page import NA, VERDICTS

MAX_TABLE_ROWS = 500

_BREAK = re.compile(r"[ \t]*\n[ \t]*")


def _join(m: re.Match[str]) -> str:
    """Takes a line break (with the blanks around it) of a template's source. Returns "" beside
    a tag or a Jinja delimiter, else one space."""
    source, start, end = m.string, m.start(), m.end()
    before = source[start - 1] if start > 0 else ">"
    after = source[end] if end < len(source) else "<"
    return "" if before in ">}" or after in "<{" else " "


class Compact(Extension):
    """Joins the lines of every *.j2 template as it is loaded (module docstring); other files
    a template includes (the style sheet) are left as they are."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        """Takes a template's source and name. Returns the source with its lines joined."""
        if not (name or "").endswith(".j2"):
            return source
        return _BREAK.sub(_join, source)


def href(rel: Any) -> str:
    """Takes a relative path. Returns it URL-quoted, for an href or a src (the template
    escapes it as it escapes everything); an anchor on the page ("#log-1") keeps its "#"."""
    text = str(rel)
    return "#" + quote(text[1:]) if text.startswith("#") else quote(text)


def thousands(n: Any) -> str:
    """Takes a number. Returns it with thousands separators."""
    return f"{n:,}"


@dataclass(frozen=True)
class Note:
    """A paragraph set apart as a note (<p class="note">)."""

    text: str


@dataclass(frozen=True)
class Para:
    """A plain paragraph, after a colour swatch when one is given."""

    text: str
    swatch: str | None = None


@dataclass(frozen=True)
class Codes:
    """A paragraph of ids shown as code after a label ("Examples: ..."), then "… N more"."""

    label: str
    codes: tuple[str, ...]
    more: int = 0


ENV = Environment(
    loader=PackageLoader("reports", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    extensions=[Compact],
)
ENV.filters["href"] = href
ENV.filters["thousands"] = thousands
ENV.tests["note"] = lambda x: isinstance(x, Note)
ENV.tests["para"] = lambda x: isinstance(x, Para)
ENV.tests["codes"] = lambda x: isinstance(x, Codes)
ENV.tests["table"] = lambda x: isinstance(x, Table)
ENV.globals["verdicts"] = VERDICTS
ENV.globals["NA"] = NA


def render_template(template: str, **data: Any) -> str:
    """Takes a template's name (under reports/templates/) and the data it reads. Returns the
    rendered text, every value escaped."""
    return ENV.get_template(template).render(**data)


# --- tables and paragraphs as data ---------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One table cell, as data: its text (never empty: NA when there is none), whether it is
    numeric, its class, a note beneath it, and at most one of: a colour swatch before the text,
    a verdict badge (`badge`: a VERDICTS key; the text, when given, replaces the badge's own
    words), a link (`href`, relative), example ids as code (`codes`, then "… `more` more"), or
    the text as code. `header` makes it a <th> (a row's label), `title` a tooltip."""

    text: str = NA
    num: bool = False
    cls: str | None = None
    note: str = ""
    swatch: str | None = None
    badge: str | None = None
    href: str | None = None
    codes: tuple[str, ...] = ()
    more: int = 0
    code: bool = False
    title: str | None = None
    header: bool = False
    colspan: int = 1

    @property
    def classes(self) -> str:
        """Returns the cell's class attribute ("" for none)."""
        return " ".join(c for c in ("num" if self.num else None, self.cls) if c)


def _text(x: Any) -> str:
    return str(x) if x is not None and str(x).strip() else NA


def td(x: Any, num: bool = False, cls: str | None = None, note: Any = None) -> Cell:
    """Takes a value (an empty one becomes NA), whether it is numeric, a class and a note
    beneath it (an empty one is left out). Returns its Cell."""
    return Cell(_text(x), num, cls, str(note) if note is not None and str(note).strip() else "")


def th(text: Any, colspan: int = 1) -> Cell:
    """Takes a row's label (and how many columns it spans). Returns a header Cell."""
    return Cell(_text(text), header=True, colspan=colspan)


def badge_td(key: str, text: str | None = None, note: Any = None, title: str | None = None) -> Cell:
    """Takes a verdict key (VERDICTS), the badge's text when not its own words, a note beneath
    it and a tooltip. Returns a Cell holding the badge."""
    said = str(note) if note is not None and str(note).strip() else ""
    return Cell(text or "", badge=key, note=said, title=title)


def link_td(rel: str, text: str) -> Cell:
    """Takes a relative path and a text. Returns a Cell linking there."""
    return Cell(_text(text), href=rel)


def swatch_td(colour: str, text: Any) -> Cell:
    """Takes a CSS colour and a text. Returns a Cell with a square of that colour before it."""
    return Cell(_text(text), swatch=colour)


def codes_td(ids: Iterable[Any], more: int = 0, cls: str | None = None) -> Cell:
    """Takes ids, how many more there are than shown, and a class. Returns a Cell showing each
    as code, then "… N more"."""
    return Cell("", cls=cls, codes=tuple(str(x) for x in ids), more=max(0, more))


def code_td(text: Any) -> Cell:
    """Takes a text (a log line). Returns a Cell showing it as code."""
    return Cell(_text(text), code=True)


@dataclass(frozen=True)
class Row:
    """One table row: its cells and its class ("bad", "group", "mend"; None for none)."""

    cells: tuple[Cell, ...]
    cls: str | None = None


@dataclass(frozen=True)
class Table:
    """A table as data: header texts with whether each is numeric (None: no header row), its
    rows (at most MAX_TABLE_ROWS), how many more were left out, and whether it spans the
    column."""

    headers: tuple[tuple[str, bool], ...] | None
    rows: tuple[Row, ...]
    more: int = 0
    wide: bool = False


def table(
    headers: Iterable[str] | None,
    rows: Iterable[Iterable[Cell]],
    total: int | None = None,
    *,
    wide: bool = False,
    num_cols: Iterable[int] = (),
    row_classes: Iterable[str | None] | None = None,
) -> Table:
    """Takes header texts (or None), rows of Cells, how many rows there are in all, whether the
    table spans the column, which header columns are numeric and each row's class.

    Returns a Table of at most MAX_TABLE_ROWS rows, saying how many of `total` were left out.
    """
    nums = set(num_cols)
    head = None if headers is None else tuple((str(h), i in nums) for i, h in enumerate(headers))
    classes = iter(row_classes) if row_classes is not None else None
    kept: list[Row] = []
    for cells in rows:
        cls = next(classes, None) if classes is not None else None
        if len(kept) >= MAX_TABLE_ROWS:
            break
        kept.append(Row(tuple(cells), cls))
    more = total - len(kept) if total is not None and total > len(kept) else 0
    return Table(head, tuple(kept), more, wide)
