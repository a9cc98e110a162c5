"""A quorum queue: a Raft log replicated on a majority before a publish is confirmed."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from clusters.rabbitmq_admin import QueueDepth
from workloads.kinds.base import QueueConfigError, QueueKind, QueueSettings

if TYPE_CHECKING:
    from clusters.base import Node
    from clusters.rabbitmq_admin import RabbitAdmin


class Quorum(QueueKind):
    """A quorum queue. Its depth is asked of its Raft leader itself: list_queues' counts of a
    quorum queue are metrics emitted every few seconds, and a passive declare answers 0 when
    the leader is slow."""

    name = "quorum"
    summary = "a quorum queue (Raft), always durable"
    takes_delivery_limit = True
    takes_delayed_retry = True
    takes_priorities = True

    def validate(self, spec: QueueSettings, node_count: int) -> None:
        """Quorum queues are durable and take no mirroring settings."""
        super().validate(spec, node_count)
        if not spec.durable:
            raise QueueConfigError("quorum queues are always durable")

    def arguments(self, spec: QueueSettings) -> dict[str, Any]:
        """Adds the initial group size and delivery limit, when set."""
        args = super().arguments(spec)
        if spec.quorum_initial_group_size is not None:
            args["x-quorum-initial-group-size"] = spec.quorum_initial_group_size
        if spec.delivery_limit is not None:
            args["x-delivery-limit"] = spec.delivery_limit
        for key, value in (("x-delayed-retry-type", spec.delayed_retry_type),
                           ("x-delayed-retry-min", spec.delayed_retry_min_ms),
                           ("x-delayed-retry-max", spec.delayed_retry_max_ms),
                           ("x-consumer-disconnected-timeout",
                            spec.consumer_disconnected_timeout_ms)):
            if value is not None:
                args[key] = value
        return args

    def describe(self, queue: Mapping[str, Any]) -> list[str]:
        """Its initial group size, when set, then the delivery limit."""
        size = queue.get("quorum_initial_group_size")
        return ([f"initial group size {size}"] if size else []) + super().describe(queue)

    def depth(self, admin: RabbitAdmin, node: Node, queue: str) -> QueueDepth:
        """Asks the queue's Raft leader (through the node) for ready and checked-out counts."""
        return admin.quorum_depth(node, queue)

    def proof_without(self, placement: Mapping[str, Any],
                      down: Collection[str]) -> str | None:
        """A quorum queue's depth is its Raft leader's answer: a leader elected by a majority of
        its members holds every confirmed message (each was written on a majority), so when a
        majority of its members serve, the leader's answer proves it empty without the members
        that are down; without a serving majority no answer can."""
        members = [str(m) for m in placement.get("members") or ()]
        if not members:
            return "no serving node says which nodes are its members"
        serving = [m for m in members if m not in down]
        if 2 * len(serving) <= len(members):
            return (f"only {', '.join(serving) or 'none'} of its members {', '.join(members)} "
                    f"serve{'s' if len(serving) == 1 else ''}: without a majority no leader's "
                    f"answer proves it empty")
        return None
