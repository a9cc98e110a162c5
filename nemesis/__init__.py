"""Faults: partition shapes (pure maths), iptables/tc command builders (pure), process faults,
RabbitMQ's own operations, schedules.

The harness needs only what is re-exported here: `NemesisOptions` (what to
do), `NemesisInterpreter` (do it in a thread, record it, heal), `FAULTS` (the
registry of named faults, nemesis.faults) and the errors.

The modules, from the bottom up: `errors`; the pure `partition`, `commands`
and `targets`; `net` (iptables and tc through a Remote); `protocol` (what a
fault is and acts through); `healers`; the faults themselves in `faults/`
(`process`, `network`, `operations`) and their registry (`faults/__init__`); `options`;
`schedule`; `played` (a history's faults read back as a schedule played once);
`interpreter`. Each imports only modules before it.
"""

from nemesis.errors import (
    FaultError,
    FaultUnsupported,
    NemesisConfigError,
    NemesisError,
    ShapeError,
)
from nemesis.faults import FAULTS, fault_names, make_fault
from nemesis.interpreter import NemesisInterpreter
from nemesis.options import NemesisOptions
from nemesis.schedule import Step, plan

__all__ = [
    "FAULTS",
    "FaultError",
    "FaultUnsupported",
    "NemesisConfigError",
    "NemesisError",
    "NemesisInterpreter",
    "NemesisOptions",
    "ShapeError",
    "Step",
    "fault_names",
    "make_fault",
    "plan",
]
