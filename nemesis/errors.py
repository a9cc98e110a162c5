"""Every error the nemesis raises, in one place.

`NemesisError` is the base. `NemesisConfigError` is a bad option, found
before anything runs (the harness exits 2 on it). `ShapeError` is a partition
shape that cannot be built for the given nodes. `FaultUnsupported` says a node
cannot host a fault at all (tc netem on a kernel without sch_netem);
`FaultError` says a fault's action failed on one or more nodes.
"""

from __future__ import annotations


class NemesisError(Exception):
    """Base of every nemesis error."""


class NemesisConfigError(NemesisError, ValueError):
    """An option, or combination of options, that cannot make a nemesis."""


class ShapeError(NemesisError, ValueError):
    """A partition shape that cannot be built for these nodes."""


class FaultUnsupported(NemesisError):
    """A node cannot host this fault at all (e.g. no tc netem in its kernel)."""


class FaultError(NemesisError):
    """A fault's action failed on one or more nodes."""
