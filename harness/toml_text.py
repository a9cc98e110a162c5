"""A small TOML writer for the plain data a scenario file holds (Python's tomllib reads it back).

`dumps` takes a mapping of text keys to values: text, booleans, whole and
finite real numbers, lists of those (or of lists of them), mappings (written
as `[tables]`, after the keys of the table they are in) and lists of
mappings (written as `[[arrays of tables]]`, whose items hold no further
tables). A mapping may carry a comment under the key `COMMENT`, written as
`#` lines at its head. Nothing else is taken: None (TOML has no null), a
date, an infinite number or a mixed list raise TypeError, so what is written
always reads back as it was given.

It is this much rather than a dependency (tomli-w): a scenario is a few
dozen plain keys, the writer is tested by reading its output with tomllib,
and the harness's hosts need nothing more installed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

COMMENT = "#"
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def dumps(data: Mapping[str, Any], header: str = "") -> str:
    """Takes a mapping and an optional comment for the top of the file. Returns the TOML text.

    Raises TypeError for a value TOML cannot hold as given (the module's docstring).
    """
    lines = _comment(header)
    _table(data, (), lines, header=None)
    return "\n".join(lines).strip("\n") + "\n"


def key(name: str) -> str:
    """Takes a key. Returns it bare when TOML allows, else quoted."""
    if not isinstance(name, str):
        raise TypeError(f"a TOML key is text, not {name!r}")
    return name if _BARE.match(name) else string(name)


def string(text: str) -> str:
    """Takes text. Returns it as a TOML basic string."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def value(v: Any) -> str:
    """Takes a scalar or a list of them. Returns it as an inline TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise TypeError(f"a scenario file takes finite numbers only, not {v!r}")
        return repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, Sequence):
        items = [value(x) for x in v]
        kinds = {_kind(x) for x in v}
        if len(kinds) > 1:
            raise TypeError(f"a list of one kind of value only, not {list(v)!r}")
        return "[" + ", ".join(items) + "]"
    raise TypeError(f"TOML cannot hold {v!r} ({type(v).__name__})")


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return "text" if isinstance(v, str) else "list"


def _comment(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines()] if text else []


def _is_tables(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, str) and bool(v) and \
        all(isinstance(x, Mapping) for x in v)


def _table(data: Mapping[str, Any], path: tuple[str, ...], lines: list[str],
           header: str | None, nested: bool = True) -> None:
    if header is not None:
        lines += ["", header]
    lines += _comment(str(data.get(COMMENT, "")))
    tables, arrays = [], []
    for name, v in data.items():
        if name == COMMENT:
            continue
        if isinstance(v, Mapping):
            tables.append((name, v))
        elif _is_tables(v):
            arrays.append((name, v))
        else:
            lines.append(f"{key(name)} = {value(v)}")
    if (tables or arrays) and not nested:
        raise TypeError(f"an item of [[{'.'.join(path)}]] holds no tables")
    for name, v in tables:
        sub = (*path, name)
        _table(v, sub, lines, f"[{'.'.join(key(k) for k in sub)}]")
    for name, items in arrays:
        sub = (*path, name)
        for item in items:
            _table(item, sub, lines, f"[[{'.'.join(key(k) for k in sub)}]]", nested=False)
