"""The checkers' errors: `CheckerError`, the room's root, and below it `HistoryError`, a history
that breaks the contract of shared/DESIGN.md.

`HistoryError` (a ValueError too) is raised at the boundary (`check_history`, the CLI exits 2 on
it) for input a checker cannot judge: a line that is not a JSON object, a
field of the wrong type, an unknown op type or process, indexes that do not
strictly increase, a publish completion without its invocation. It names the
file and the 1-based line. A history cut short by a crash is not an error.
"""

from __future__ import annotations

from pathlib import Path


class CheckerError(Exception):
    """Base of every error of checkers/."""


class HistoryError(CheckerError, ValueError):
    """A history the checkers cannot judge. Takes the message, the line (1-based) and the path."""

    def __init__(self, message: str, line: int | None = None, path: Path | str | None = None) -> None:
        self.message = message
        self.line = line
        self.path = None if path is None else str(path)
        where = self.path or "history"
        prefix = f"{where}:{line}: " if line is not None else f"{where}: "
        super().__init__(prefix + message)


def orphan_ack_message(mid: str) -> str:
    """Takes a message id. Returns what is wrong with an ack of it that acknowledges nothing."""
    return (f"ack of {mid!r} without an unacknowledged delivery of it before it "
            f"(same process and consumer)")
