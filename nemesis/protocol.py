"""The fault protocol: what a fault is, what it acts through, and how it acts on several nodes.

A `Fault` is Jepsen's nemesis cut down to one fault: `start` does the
damage and returns a JSON-able description of what it hit, `stop` undoes
exactly that, and `heal_all` ends every fault of its kind on every node
whatever happened before (it never raises). Its static facts are one
`FaultInfo`, its declaration. A fault that can check its nodes before the
test also implements the optional `Preflight`. Faults keep what they hit
between start and stop, so one instance serves one run.

`FaultContext` is everything a fault may act through: the cluster's nodes
(and their Remotes), the Broker, its own options (`FaultOptions`: the
options of the fault entry it plays), the queue and the QueueAdmin that
says where it lives; `operate` runs one of RabbitMQ's own operations
(clusters.rabbitmq_ops) on a node through the broker's CLI, and the
`Ledger` keeps what faults did that only they know how to undo (a quorum
member removed), shared by every entry's context and the heal's, so the heal
undoes it whichever entry did it. `on_nodes` runs an
action on several nodes at once, like Jepsen's `on-nodes`.

This module depends on no other fault module: the faults, the healers, the
registry and the interpreter import it, never the other way round.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from clusters.base import Broker, BrokerCli, Cluster, Node, QueueAdmin
from clusters.rabbitmq_ops import Command
from history.faults import FaultKind
from nemesis.errors import FaultError, FaultUnsupported
from nemesis.targets import Locator, select_targets

log = logging.getLogger(__name__)

T = TypeVar("T")
Description = dict[str, Any]


@dataclass(frozen=True)
class FaultInfo:
    """A fault's declaration, the one place its facts are written.

    - name: what a fault entry calls it ("kill")
    - kind: how the history shows it (history.faults: the fs that start and stop it, and the
      label and colour of the report), shared by similar faults
    - heals: the healer that ends every fault of its kind (a key of nemesis.healers.HEALERS)
    - options: the options it reads besides targets (NemesisOptions field names), which a fault
      entry may set for it alone; every fault also takes its own `duration` and `interval`
    - takes_targets: it acts on the nodes its `targets` select (an entry may name them after @);
      without, it picks its nodes itself (a partition's shape, every node)
    - min_nodes: the least cluster it can act on; needs_queue: it asks where the queue's leader is
    - queue_kinds: the queue kinds (workloads.kinds names) it can act on; empty: any
    - needs_unsynced_fs: it needs the nodes' data directories on the layer that forgets unsynced
      writes (clusters.lazyfs), which only some backends can host (backend.unsynced_fs)
    - minority_only: it may hit only fewer nodes than a majority (a disk corruption: what a
      majority's disks lose, Raft cannot promise to keep); a spec whose targets may select a
      majority is refused
    - backends: the backends (BackendOptions.kind) it can act on; empty: any
    """

    name: str
    kind: FaultKind
    heals: str
    options: tuple[str, ...] = ()
    takes_targets: bool = False
    min_nodes: int = 1
    needs_queue: bool = False
    queue_kinds: tuple[str, ...] = ()
    needs_unsynced_fs: bool = False
    minority_only: bool = False
    backends: tuple[str, ...] = ()

    @property
    def start_f(self) -> str:
        """Returns the history f of its start."""
        return self.kind.start_f

    @property
    def stop_f(self) -> str:
        """Returns the history f of its stop."""
        if self.kind.stop_f is None:
            raise ValueError(f"fault kind {self.kind.name!r} has no stop op")
        return self.kind.stop_f


class FaultOptions(Protocol):
    """What faults read of their options (a nemesis.options.NemesisOptions, resolved for the
    fault entry being played: its own targets and settings over the global ones)."""

    @property
    def targets(self) -> str: ...
    @property
    def command_timeout_s(self) -> float: ...
    @property
    def packet_loss(self) -> float: ...
    @property
    def packet_scope(self) -> str: ...
    @property
    def bandwidth_kbit(self) -> int: ...
    @property
    def bandwidth_burst_bytes(self) -> int: ...
    @property
    def bandwidth_latency_ms(self) -> int: ...
    @property
    def delay_ms(self) -> float: ...
    @property
    def jitter_ms(self) -> float: ...
    @property
    def duplicate_pct(self) -> float: ...
    @property
    def reorder_pct(self) -> float: ...
    @property
    def corrupt_mode(self) -> str: ...
    @property
    def corrupt_bytes(self) -> int: ...
    @property
    def corrupt_probability(self) -> float: ...


class Ledger:
    """What the run's faults did that the heal must undo and cannot ask the brokers about, by
    heal kind (a FaultInfo's `heals`): a set of JSON-able items each. Thread-safe."""

    def __init__(self) -> None:
        self._items: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def note(self, kind: str, item: Any) -> None:
        """Takes a heal kind and an item. Records the item (once)."""
        with self._lock:
            items = self._items.setdefault(kind, [])
            if item not in items:
                items.append(item)

    def done(self, kind: str, item: Any) -> None:
        """Takes a heal kind and an item. Forgets the item: it was undone."""
        with self._lock:
            items = self._items.get(kind, [])
            if item in items:
                items.remove(item)

    def items(self, kind: str) -> list[Any]:
        """Takes a heal kind. Returns its items still to undo, in the order noted."""
        with self._lock:
            return list(self._items.get(kind, []))


@dataclass(frozen=True)
class FaultContext:
    """What faults act through: the cluster, its broker, the options, the queue and its admin.

    `cancel` is set when the nemesis is asked to stop; long faults (a rolling
    restart) check it between nodes. `admin` answers where the queue lives (its leader,
    its other replicas), for the faults and targets that ask. `ledger` is shared by every
    context made from this one with dataclasses.replace.
    """

    cluster: Cluster
    broker: Broker
    options: FaultOptions
    queue: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    admin: QueueAdmin | None = None
    ledger: Ledger = field(default_factory=Ledger)

    @property
    def nodes(self) -> list[Node]:
        """Returns the cluster's nodes, in order."""
        return list(self.cluster.nodes)

    @property
    def names(self) -> list[str]:
        """Returns the cluster's node names, in order."""
        return [n.name for n in self.cluster.nodes]

    @property
    def timeout(self) -> float:
        """Returns the hard timeout, in seconds, of one iptables or tc command."""
        return self.options.command_timeout_s

    def node(self, name: str) -> Node:
        """Takes a node name. Returns the node."""
        return self.cluster.node(name)

    def can_operate(self) -> bool:
        """Returns whether the broker runs RabbitMQ's CLI tools (clusters.base.BrokerCli)."""
        return isinstance(self.broker, BrokerCli)

    def operate(self, node: Node, command: Command) -> str:
        """Takes a node and one of RabbitMQ's operations (clusters.rabbitmq_ops). Runs it against
        the node through the broker's CLI, within the command's hard timeout. Returns its
        output.

        Raises FaultUnsupported when the broker runs no CLI, RemoteError (CommandTimeout) when
        the command fails.
        """
        broker = self.broker
        if not isinstance(broker, BrokerCli):
            raise FaultUnsupported(f"{' '.join(command.words()[:2])}: this broker runs no "
                                   f"RabbitMQ CLI tools")
        return broker.ctl(node, *command.args, tool=command.tool, timeout=command.timeout_s)

    def queue_name(self) -> str:
        """Returns the queue the faults act on. Raises FaultError when there is none."""
        if self.queue is None:
            raise FaultError("no queue given, so there is no queue to act on")
        return self.queue

    def leader(self) -> str:
        """Returns the name of the node hosting the queue's leader.

        Raises FaultError when there is no queue, the broker does not know, or
        it names a node outside the cluster.
        """
        if self.queue is None or self.admin is None:
            raise FaultError("no queue given, so there is no queue leader to target")
        name = self.admin.queue_leader(self.queue)
        if name is None:
            raise FaultError(f"the leader of queue {self.queue!r} is not known")
        if name not in self.names:
            raise FaultError(f"queue {self.queue!r} leader {name!r} is not a cluster node")
        return name

    def followers(self) -> list[str]:
        """Returns the names of the nodes hosting the queue's other replicas (quorum members or
        classic mirrors besides the leader), asked of the broker now; [] when there are none.

        Raises FaultError when there is no queue.
        """
        if self.queue is None or self.admin is None:
            raise FaultError("no queue given, so there are no queue replicas to target")
        placement = self.admin.queue_placement(self.queue)
        leader = placement.get("leader")
        replicas = set(placement.get("members") or []) | set(placement.get("mirrors") or [])
        return sorted(n for n in replicas - {leader} if n in self.names)

    def targets(self, rng: random.Random) -> list[Node]:
        """Takes a Random. Returns the nodes the options' target spec selects now."""
        names = select_targets(self.options.targets, self.names, rng,
                               Locator(self.leader, self.followers))
        return [self.node(n) for n in names]


class Fault(Protocol):
    """One kind of fault: start it, stop it, heal every trace of its kind."""

    info: FaultInfo

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Returns what it hit; raises when it failed.

        The description is JSON-able and has "fault" (the name) and "nodes"
        (the nodes hit; the history's `node` is set when there is one).
        """
        ...

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Undoes what the last start did. Returns a description."""
        ...

    def heal_all(self, ctx: FaultContext) -> dict[str, str]:
        """Takes the context. Ends every fault of this kind on every node; never raises.

        Returns each node's outcome ("error: ..." when it failed).
        """
        ...


@runtime_checkable
class Preflight(Protocol):
    """Optional: a fault that can check, before the test, that every node can host it."""

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. Returns None when every node can host the fault.

        Raises FaultUnsupported (or another NemesisError / RemoteError) when not.
        """
        ...


def on_nodes(
    nodes: Sequence[Node], fn: Callable[[Node], T]
) -> tuple[dict[str, T], dict[str, Exception]]:
    """Takes nodes and an action. Runs it on all of them at once.

    Returns (results by node name, exceptions by node name); one node failing
    does not stop the others.
    """
    results: dict[str, T] = {}
    errors: dict[str, Exception] = {}
    if len(nodes) <= 1:
        for node in nodes:
            try:
                results[node.name] = fn(node)
            except Exception as e:
                errors[node.name] = e
        return results, errors
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="nemesis") as pool:
        futures = {node.name: pool.submit(fn, node) for node in nodes}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as e:
                errors[name] = e
    return results, errors


def raise_for_errors(action: str, errors: Mapping[str, Exception]) -> None:
    """Takes what was being done and per-node exceptions. Returns None when there are none.

    Re-raises a FaultUnsupported as it is; raises FaultError naming every
    failed node otherwise.
    """
    if not errors:
        return
    for e in errors.values():
        if isinstance(e, FaultUnsupported):
            raise e
    detail = "; ".join(f"{name}: {describe_error(e)}" for name, e in sorted(errors.items()))
    raise FaultError(f"{action} failed on {detail}")


def describe_error(e: BaseException) -> str:
    """Takes an exception. Returns "Type: message" for the history's error field."""
    return f"{type(e).__name__}: {e}".strip()
