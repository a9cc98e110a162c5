"""The one way the project replaces a whole file: a temporary file beside it, then a rename.

A run killed half-way, or a reader looking meanwhile, finds the old file or the new one,
never half of one (test.json, results.json, the pages, the plots, the scenario files, a
backend's run record, the store's `latest` link). Every room may import it: it sits at the
bottom of the house with the history, which is written the other way (appended and flushed
line by line, `history.HistoryWriter`).

The temporary name is hidden and the writer's own (`.<name>.<pid>.<thread>.tmp`), so two
processes or threads rewriting one file (the store's index) never write into each other's,
and it is removed when the writing fails.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temp_path(path: Path) -> Path:
    """Takes the file to replace. Returns the temporary path beside it this process and thread
    write it through."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Takes the file to replace. Yields a temporary path beside it for the caller to make
    (write, save a figure into, make a symlink at); when the block ends without an exception,
    renames it over path. The temporary path is removed whatever happened."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Takes a path and its whole content (text is written as UTF-8). Replaces the file
    atomically. Returns the path."""
    path = Path(path)
    with replacing(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
    return path
