"""The faults the nemesis knows: each declared once, by a FaultInfo, and registered by name.

Each fault starts, lasts its duration, and stops; the history records both
ends as an `invoke` and an `info` op of process "nemesis" (f names in
brackets, from the fault's kind in history.faults). "Targets" means the
nodes picked by the fault's targets: the entry's own (`kill@leader`), else
the `targets` option: `one`, `random`, `minority`, `majority`, `all`,
`leader` (the queue leader's node), `follower(s)` or node names such as
`n1,n3`. Options in brackets are those a fault entry may set for that fault
alone (`packet-loss@n2:packet_loss=0.5`); every fault also takes its own
`duration` and `interval`.

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

Disks (nemesis.faults.disk; the nodes' data directories on the unsynced layer,
backend.unsynced_fs, which a power-loss fault turns on):

- `power-loss`: SIGKILLs the targets' brokers and drops every write their layers hold
  unsynced, recording what each dropped; stop starts them again
  [start-power-loss / stop-power-loss].

- `disk-corrupt`: SIGKILLs the targets' brokers (a minority at most: `disk-corrupt@one`,
  `@minority`, `@leader`, `@follower`) and damages one of the queue's own files on each, in the
  spirit of Jepsen's file nemesis: its quorum segments or the node's WAL, its classic index or
  message store, its stream segments or indexes; `bitflip` flips bits of a chunk at a random
  offset, `truncate` cuts the file's tail; what was damaged is recorded (`damaged`); stop starts
  them again (local backend only) [start-disk-corrupt / stop-disk-corrupt]
  [corrupt_mode, corrupt_bytes, corrupt_probability].

RabbitMQ's own operations (through the broker's CLI, each call with a hard timeout; the
commands are clusters.rabbitmq_ops's, the same on 3.10 and 4.0):

- `leader-transfer`: hands the quorum queue's leadership from its leader's node to another of
  its members, picked at random (rabbit_quorum_queue:transfer_leadership by
  `rabbitmqctl eval`: `rabbitmq-queues rebalance quorum` never moves the leader of a
  single queue); stop asks where the leader is now [transfer-leader / check-leader].
- `member-remove`: removes the quorum queue's members on the targets
  (`rabbitmq-queues delete_member`, one at a time; `member-remove@leader`,
  `member-remove@follower`); stop adds them back (`add_member`) [remove-member / add-member].
- `maintenance`: puts the targets into maintenance mode (`rabbitmq-upgrade drain`: their
  clients' connections closed, listeners suspended, quorum leaders handed over, quorum
  members stopped); stop revives them (`rabbitmq-upgrade revive`) [drain-node / revive-node].
- `memory-alarm`: sets the targets' memory high watermark to 0
  (`rabbitmqctl set_vm_memory_high_watermark 0`), so their memory alarm blocks every
  publisher in the cluster; stop sets it back to the node's configured value
  [start-alarm / stop-alarm].
- `disk-alarm`: sets the targets' free-disk limit to 1 EB (`rabbitmqctl set_disk_free_limit`),
  so their disk alarm blocks every publisher; stop sets the configured limit back
  [start-alarm / stop-alarm].

The heal undoes them on every node whatever happened before: it revives each node that says it
is drained, adds back each member a `member-remove` removed (the faults' shared ledger), and
sets every node's memory and disk limits back to its configuration. Publishes the alarms hold
end `info` with error "blocked" (workloads.publisher), never `fail`.

Packets (on the targets) [start-packet / stop-packet]:

- `packet-loss`: drops a random share of packets both ways with iptables `-m statistic`, of
  cluster-peer traffic only or of all traffic [packet_loss, packet_scope].
- `bandwidth`: limits what the targets send with `tc ... tbf`
  [bandwidth_kbit, bandwidth_burst_bytes, bandwidth_latency_ms].
- `netem-delay`: delays what the targets send with tc netem [delay_ms, jitter_ms].
- `netem-duplicate`: duplicates a share of what the targets send with tc netem [duplicate_pct].
- `netem-reorder`: reorders a share of what the targets send with tc netem
  [reorder_pct, delay_ms].

The netem faults need the kernel's sch_netem module; where it is missing they
raise FaultUnsupported, before the test when the interpreter's `setup` probes for it.

To add a fault: a Fault (nemesis.protocol) in a module here, its FaultInfo and
its line in DECLARED.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from clusters.rabbitmq_ops import (
    Command,
    disk_alarm,
    drain,
    memory_alarm,
    restore_disk_limit,
    restore_memory_limit,
    restored,
    revive,
)
from history.faults import (
    ALARM,
    DISK_CORRUPT,
    FULL_RESTART,
    KILL,
    LEADER_TRANSFER,
    MAINTENANCE,
    MEMBER_REMOVE,
    PACKET,
    PARTITION,
    PAUSE,
    POWER_LOSS,
    ROLLING_RESTART,
    STOP,
    FaultKind,
)
from nemesis.errors import NemesisConfigError
from nemesis.faults.disk import DiskCorrupt, PowerLoss
from nemesis.faults.network import (
    PacketLossFault,
    PartitionFault,
    QdiscFault,
    Shape,
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
from nemesis.faults.operations import LeaderTransfer, MemberRemoval, OnTargets
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
from nemesis.healers import MEMBERSHIP
from nemesis.protocol import Fault, FaultInfo

# A fault's declaration and what makes it from that declaration.
Declared = tuple[FaultInfo, Callable[[FaultInfo], Fault]]


def _partition(name: str, shape: Shape, *, takes_targets: bool = False, min_nodes: int = 2,
               needs_queue: bool = False) -> Declared:
    info = FaultInfo(name, PARTITION, "iptables", takes_targets=takes_targets,
                     min_nodes=min_nodes, needs_queue=needs_queue)
    return info, partial(PartitionFault, shape=shape)


def _on_targets(name: str, kind: FaultKind, heals: str, make: Callable[[FaultInfo], Fault],
                options: tuple[str, ...] = ()) -> Declared:
    return FaultInfo(name, kind, heals, options, takes_targets=True), make


def _alarm(name: str, resource: str, on: Callable[[], Command],
           off: Callable[[], Command]) -> Declared:
    return _on_targets(name, ALARM, "alarm", partial(OnTargets, act=on, undo=off, said=restored,
                                                     extra={"resource": resource}))


DECLARED: tuple[Declared, ...] = (
    _partition("partition-one", shape_one, takes_targets=True),
    _partition("partition-halves", shape_halves),
    _partition("partition-random-halves", shape_random_halves),
    _partition("partition-majorities-ring", shape_majorities_ring, min_nodes=3),
    _partition("partition-bridge", shape_bridge, min_nodes=3),
    _partition("partition-leader", shape_leader, needs_queue=True),
    _on_targets("kill", KILL, "process",
                partial(NodeProcessFault, act=kill, undo=start_if_down)),
    _on_targets("stop", STOP, "process",
                partial(NodeProcessFault, act=stop_gracefully, undo=start_if_down)),
    _on_targets("pause", PAUSE, "pause", partial(NodeProcessFault, act=pause, undo=resume)),
    (FaultInfo("rolling-restart", ROLLING_RESTART, "process"), RollingRestart),
    (FaultInfo("full-restart", FULL_RESTART, "process"), FullRestart),
    (FaultInfo("power-loss", POWER_LOSS, "process", takes_targets=True, needs_unsynced_fs=True),
     PowerLoss),
    (FaultInfo("disk-corrupt", DISK_CORRUPT, "process", ("corrupt_mode", "corrupt_bytes",
                                                         "corrupt_probability"),
               takes_targets=True, needs_queue=True, minority_only=True, backends=("local",)),
     DiskCorrupt),
    (FaultInfo("leader-transfer", LEADER_TRANSFER, "none", min_nodes=2, needs_queue=True,
               queue_kinds=("quorum",)), LeaderTransfer),
    (FaultInfo("member-remove", MEMBER_REMOVE, MEMBERSHIP, takes_targets=True, min_nodes=2,
               needs_queue=True, queue_kinds=("quorum",)), MemberRemoval),
    _on_targets("maintenance", MAINTENANCE, "maintenance",
                partial(OnTargets, act=drain, undo=revive, said=lambda _out: "revived")),
    _alarm("memory-alarm", "memory", memory_alarm, restore_memory_limit),
    _alarm("disk-alarm", "disk", disk_alarm, restore_disk_limit),
    _on_targets("packet-loss", PACKET, "iptables", PacketLossFault,
                ("packet_loss", "packet_scope")),
    _on_targets("bandwidth", PACKET, "tc", partial(QdiscFault, build=tbf, settings=tbf_settings),
                ("bandwidth_kbit", "bandwidth_burst_bytes", "bandwidth_latency_ms")),
    _on_targets("netem-delay", PACKET, "tc",
                partial(QdiscFault, build=delay, settings=delay_settings, netem=True),
                ("delay_ms", "jitter_ms")),
    _on_targets("netem-duplicate", PACKET, "tc",
                partial(QdiscFault, build=duplicate, settings=duplicate_settings, netem=True),
                ("duplicate_pct",)),
    _on_targets("netem-reorder", PACKET, "tc",
                partial(QdiscFault, build=reorder, settings=reorder_settings, netem=True),
                ("reorder_pct", "delay_ms")),
)

INFO: Mapping[str, FaultInfo] = {info.name: info for info, _ in DECLARED}
FAULTS: dict[str, Callable[[], Fault]] = {info.name: partial(make, info) for info, make in DECLARED}


def fault_names() -> tuple[str, ...]:
    """Returns every known fault name, in registry order."""
    return tuple(FAULTS)


def fault_info(name: str) -> FaultInfo:
    """Takes a fault name. Returns its declaration.

    Raises NemesisConfigError listing the known names when it is unknown.
    """
    info = INFO.get(name)
    if info is None:
        raise NemesisConfigError(
            f"unknown fault {name!r}; known faults: {', '.join(fault_names())}"
        )
    return info


def make_fault(name: str) -> Fault:
    """Takes a fault name. Returns a fresh instance of that fault.

    Raises NemesisConfigError listing the known names when it is unknown.
    """
    return FAULTS[fault_info(name).name]()
