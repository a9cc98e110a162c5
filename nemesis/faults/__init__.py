"""The faults the nemesis knows, by name.

Each fault starts, lasts `duration_s`, and stops; the history records both
ends as an `invoke` and an `info` op of process "nemesis" (f names in
brackets). "Targets" means the nodes picked by the `targets` option: `one`,
`random`, `minority`, `majority`, `all`, `leader` (the queue leader's node) or
node names such as `n1,n3`.

Partitions (iptables DROP both ways, in the chains RMQH-IN/RMQH-OUT; stop
flushes them) [start-partition / stop-partition]:

- `partition-one`: isolates one node, picked from the targets, from all others.
- `partition-halves`: cuts the cluster in two in node order, the smaller half first (n1 | n2 n3).
- `partition-random-halves`: cuts the cluster into two random halves.
- `partition-majorities-ring`: every node sees a majority, no two the same majority (needs 3+ nodes).
- `partition-bridge`: two random halves joined by one node that sees both (needs 3+ nodes).
- `partition-leader`: isolates the node hosting the queue's leader, asked of the broker at fault time.

Processes (through the Broker):

- `kill`: SIGKILLs the targets' brokers; stop starts them again [kill / start].
- `stop`: stops the targets' brokers gracefully; stop starts them again [stop / start].
- `pause`: SIGSTOPs the targets' brokers; stop SIGCONTs them [pause / resume].
- `rolling-restart`: stops and starts every broker in turn, in random order, each booted
  before the next; stop starts any left down [start-rolling-restart / stop-rolling-restart].
- `full-restart`: stops every broker, so the cluster is down for the fault's duration;
  stop starts them all at once [start-full-restart / stop-full-restart].

Packets (on the targets) [start-packet / stop-packet]:

- `packet-loss`: drops a random share (`packet_loss`) of packets both ways with iptables
  `-m statistic`, of cluster-peer traffic only or of all traffic (`packet_scope`).
- `bandwidth`: limits what the targets send with `tc ... tbf` (`bandwidth_kbit`, burst, latency).
- `netem-delay`: delays what the targets send by `delay_ms` ± `jitter_ms` with tc netem.
- `netem-duplicate`: duplicates `duplicate_pct` % of what the targets send with tc netem.
- `netem-reorder`: reorders `reorder_pct` % of what the targets send with tc netem.

The netem faults need the kernel's sch_netem module; where it is missing they
raise FaultUnsupported, before the test when the interpreter's `setup` probes for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from nemesis.errors import NemesisConfigError
from nemesis.faults.network import (
    PacketLossFault,
    PartitionFault,
    QdiscFault,
    delay,
    delay_settings,
    duplicate,
    duplicate_settings,
    reorder,
    reorder_settings,
    shape_bridge,
    shape_halves,
    shape_leader,
    shape_majorities_ring,
    shape_one,
    shape_random_halves,
    tbf,
    tbf_settings,
)
from nemesis.faults.process import (
    FullRestart,
    NodeProcessFault,
    RollingRestart,
    kill,
    pause,
    resume,
    start_if_down,
    stop_gracefully,
)
from nemesis.protocol import Fault, FaultInfo

log = logging.getLogger(__name__)

FAULTS: dict[str, Callable[[], Fault]] = {
    "partition-one": partial(PartitionFault, "partition-one", shape_one),
    "partition-halves": partial(PartitionFault, "partition-halves", shape_halves),
    "partition-random-halves": partial(
        PartitionFault, "partition-random-halves", shape_random_halves
    ),
    "partition-majorities-ring": partial(
        PartitionFault, "partition-majorities-ring", shape_majorities_ring, min_nodes=3
    ),
    "partition-bridge": partial(PartitionFault, "partition-bridge", shape_bridge, min_nodes=3),
    "partition-leader": partial(PartitionFault, "partition-leader", shape_leader, needs_queue=True),
    "kill": partial(
        NodeProcessFault, FaultInfo("kill", "kill", "start", "process"), kill, start_if_down
    ),
    "stop": partial(
        NodeProcessFault,
        FaultInfo("stop", "stop", "start", "process"),
        stop_gracefully,
        start_if_down,
    ),
    "pause": partial(
        NodeProcessFault, FaultInfo("pause", "pause", "resume", "pause"), pause, resume
    ),
    "rolling-restart": RollingRestart,
    "full-restart": FullRestart,
    "packet-loss": PacketLossFault,
    "bandwidth": partial(QdiscFault, "bandwidth", tbf, tbf_settings),
    "netem-delay": partial(QdiscFault, "netem-delay", delay, delay_settings, netem=True),
    "netem-duplicate": partial(
        QdiscFault, "netem-duplicate", duplicate, duplicate_settings, netem=True
    ),
    "netem-reorder": partial(QdiscFault, "netem-reorder", reorder, reorder_settings, netem=True),
}


def fault_names() -> tuple[str, ...]:
    """Returns every known fault name, in registry order."""
    return tuple(FAULTS)


def make_fault(name: str) -> Fault:
    """Takes a fault name. Returns a fresh instance of that fault.

    Raises NemesisConfigError listing the known names when it is unknown.
    """
    factory = FAULTS.get(name)
    if factory is None:
        raise NemesisConfigError(
            f"unknown fault {name!r}; known faults: {', '.join(fault_names())}"
        )
    return factory()
