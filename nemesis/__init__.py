"""Faults: partition shapes (pure maths), iptables/tc command builders (pure), process faults, schedules.

The harness needs only what is re-exported here: `NemesisOptions` (what to
do), `NemesisRunner` (do it in a thread, record it, heal), `FAULTS` (the
registry of named faults; its module docstring lists them) and the errors.
"""

from nemesis.errors import (
    FaultError,
    FaultUnsupported,
    NemesisConfigError,
    NemesisError,
    ShapeError,
)
from nemesis.registry import FAULTS, fault_names, make_fault
from nemesis.runner import NemesisRunner
from nemesis.schedule import NemesisOptions, Step, plan

__all__ = [
    "FAULTS",
    "FaultError",
    "FaultUnsupported",
    "NemesisConfigError",
    "NemesisError",
    "NemesisOptions",
    "NemesisRunner",
    "ShapeError",
    "Step",
    "fault_names",
    "make_fault",
    "plan",
]
