"""Every error the nemesis raises, in one place.

`NemesisError` is the base. `NemesisConfigError` is a bad option, found
before anything runs (the harness exits 2 on it); `ScheduleError` is one about
an explicit schedule, naming the item at fault. `ShapeError` is a partition
shape that cannot be built for the given nodes. `FaultUnsupported` says a node
cannot host a fault at all (tc netem on a kernel without sch_netem);
`FaultError` says a fault's action failed on one or more nodes.
"""

from __future__ import annotations


class NemesisError(Exception):
    """Base of every nemesis error."""


class NemesisConfigError(NemesisError, ValueError):
    """An option, or combination of options, that cannot make a nemesis."""


class ScheduleError(NemesisConfigError):
    """An explicit schedule that cannot be played; `index` is the item at fault (from 0), None
    when the schedule as a whole is."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ShapeError(NemesisError, ValueError):
    """A partition shape that cannot be built for these nodes."""


class FaultUnsupported(NemesisError):
    """A node cannot host this fault at all (e.g. no tc netem in its kernel)."""


class FaultError(NemesisError):
    """A fault's action failed on one or more nodes."""
