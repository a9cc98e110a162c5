"""What every cluster backend provides: nodes, their Remotes, and broker control.

A `Cluster` is provisioned by a backend (local network namespaces, SSH hosts,
Docker). Its `nodes` each carry a `Remote` and the address peers and clients
use. A `Broker` controls the RabbitMQ process on a node; nemeses use it for
process faults; a Broker that can also run RabbitMQ's own CLI tools against a
node is a `BrokerCli` too (the nemeses' operations: drain, member changes,
alarms). A `QueueAdmin` says where a queue lives; nemeses ask it where a
queue's leader is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from clusters.remote import Remote


@dataclass(frozen=True)
class Node:
    """One broker host: its short name (n1..nN), its address, and how to reach it."""

    name: str
    ip: str
    remote: Remote

    @property
    def erlang_name(self) -> str:
        """Returns the broker's long Erlang node name, rabbit@<ip>."""
        return f"rabbit@{self.ip}"

    @property
    def interface(self) -> str:
        """Returns the network interface name inside the node that carries cluster traffic."""
        return "eth0"


def node_named(nodes: Sequence[Node], name: str) -> Node:
    """Takes a cluster's nodes and a short name. Returns the node of that name; KeyError when
    there is none (every backend's `Cluster.node`)."""
    for n in nodes:
        if n.name == name:
            return n
    raise KeyError(name)


class Cluster(Protocol):
    """A provisioned set of nodes."""

    @property
    def nodes(self) -> Sequence[Node]:
        """Returns the nodes, in order n1..nN."""
        ...

    def node(self, name: str) -> Node:
        """Returns the node with that short name; KeyError if none."""
        ...


class Broker(Protocol):
    """Controls the RabbitMQ broker on each node of a cluster."""

    def beam_pid(self, node: Node) -> int | None:
        """Returns the pid of the node's running beam.smp, or None when it is not running."""
        ...

    def kill(self, node: Node) -> None:
        """Kills the node's broker with SIGKILL (no clean shutdown)."""
        ...

    def stop(self, node: Node) -> None:
        """Stops the node's broker gracefully."""
        ...

    def start(self, node: Node) -> None:
        """Starts the node's broker (after kill or stop) and waits until it has booted."""
        ...

    def pause(self, node: Node) -> None:
        """Sends SIGSTOP to the node's beam."""
        ...

    def resume(self, node: Node) -> None:
        """Sends SIGCONT to the node's beam."""
        ...


@runtime_checkable
class BrokerCli(Protocol):
    """Optional, beside Broker: runs RabbitMQ's CLI tools against a node (clusters.rabbitmq's
    RabbitBroker.ctl), each call with a hard timeout and through the release's launcher."""

    def ctl(self, node: Node, *args: str, timeout: float = 30.0, check: bool = True,
            tool: str = "rabbitmqctl") -> str:
        """Takes a node, the tool's arguments, a hard timeout (s) and the tool (rabbitmqctl,
        rabbitmq-queues, rabbitmq-upgrade, ...). Returns its stdout; raises RemoteError when it
        fails (CommandTimeout past the timeout)."""
        ...


class QueueAdmin(Protocol):
    """Says where a queue lives, as the brokers report it now."""

    def queue_leader(self, queue: str) -> str | None:
        """Returns the short name of the node hosting the queue's leader or master, if known."""
        ...

    def queue_placement(self, queue: str) -> dict[str, Any]:
        """Returns where the queue lives: {"leader", "members", "mirrors", ...} as short node
        names, {} when unknown."""
        ...


@runtime_checkable
class UnsyncedDisks(Protocol):
    """Optional, beside Cluster: a cluster whose nodes' data directories sit on a layer that
    forgets unsynced writes (clusters.lazyfs; the local backend with `backend.unsynced_fs`)."""

    @property
    def unsynced(self) -> bool:
        """Returns whether the layers are there (a backend that can host them may not have)."""
        ...

    def power_loss(self, node: Node) -> dict[str, Any]:
        """Takes a node whose broker is down. Drops every write its layer holds unsynced.
        Returns what was dropped: `bytes`, `files`, `namespace` (changes taken back) and
        `paths` (the first few files, with their bytes). Raises ClusterError when it cannot."""
        ...

    def settle(self, node: Node) -> dict[str, Any]:
        """Takes a node. Makes everything its layer holds unsynced durable, as sync(2) would.
        Returns what was written back: `bytes`, `files`, `namespace` (changes committed) and
        `paths` (each file with its bytes). Raises ClusterError when it cannot."""
        ...


@runtime_checkable
class DataDirs(Protocol):
    """Optional, beside Broker: says where a node's broker keeps its data on the node (the
    RABBITMQ_MNESIA_BASE), for the faults that damage the files in it (nemesis.faults.disk)."""

    def data_dir(self, node: Node) -> str:
        """Takes a node. Returns its data directory's path on the node."""
        ...
