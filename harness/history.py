"""Moved to the top-level `history` package; this name stays only while other work in flight
still imports it."""

from history import *  # noqa: F403
from history import (
           HARNESS,
           NEMESIS,
           OP_TYPES,
           HistoryWriter,
           Op,
           OpType,
           iter_history,
           read_history,
)

__all__ = ["HARNESS", "NEMESIS", "OP_TYPES", "HistoryWriter", "Op", "OpType", "iter_history",
           "read_history"]
