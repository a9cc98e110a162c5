"""Clients that act on the brokers: publishers with confirms, consumers with acks, the final drain.

A workload, as in Jepsen and Maelstrom, is one small object the controller
drives through fixed phases: `setup` (declare what it needs), `start` (its
clients, until the stop event), `join`, then `drain` (the final reads, after
the cluster healed). Its clients hand every operation to the controller's
Recorder (history.Recorder), which stamps and writes it: a workload never
holds the history file, and nothing here imports the harness.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any, Protocol


class Workload(Protocol):
    """What the controller needs of a workload."""

    def setup(self, admin: Any) -> None:
        """Takes the cluster's queue admin (clusters.rabbitmq_admin). Declares what the workload
        needs (queues, policies)."""
        ...

    def start(self, stop: threading.Event, fault_active: Callable[[], bool]) -> None:
        """Starts the clients; they run until `stop` is set. `fault_active` says whether a
        fault is on now."""
        ...

    def join(self, timeout: float = 30.0) -> None:
        """Waits for the clients to finish after `stop` was set."""
        ...

    def depth(self, admin: Any, node: Any) -> Any:
        """Takes the queue admin and a node. Returns the queue's depth as that node's broker
        says it, from the source the drain proves emptiness with (a clusters.rabbitmq_admin
        QueueDepth); raises when the node does not answer."""
        ...

    def drain(self, admin: Any, down: Collection[str] = ()) -> Any:
        """Takes the queue admin and the nodes that would not boot again (none read, none asked).
        Reads what is left and says whether that is provably all; returns a report whose
        `complete`, `reason` and counts the drain's end event records."""
        ...
