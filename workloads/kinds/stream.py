"""A stream: a replicated log read over AMQP 0.9.1, where consuming removes nothing.

Every consumer reads from the first offset, so every consumer sees every
message: deliveries of one message to several consumers are the design, and
duplicates cannot invalidate a stream test (loss, unexpected messages and
per-publisher order still do). A drain is complete when a node's drain read
the log up to its last committed offset.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from clusters.rabbitmq_admin import QueueDepth
from workloads.kinds.base import QueueConfigError, QueueKind, QueueSettings

if TYPE_CHECKING:
    from clusters.base import Node
    from clusters.rabbitmq_admin import RabbitAdmin


class Stream(QueueKind):
    """A stream, read whole by every consumer."""

    name = "stream"
    summary = "a stream: a replicated log every consumer reads from its first offset"
    reads_whole_log = True
    min_prefetch = 1  # RabbitMQ refuses a stream consumer without a prefetch

    def validate(self, spec: QueueSettings, node_count: int) -> None:
        """Streams are durable, have no single active consumer (3.10), no max length in
        messages and no dead-letter exchange (the spec refuses a delivery limit)."""
        super().validate(spec, node_count)
        if not spec.durable:
            raise QueueConfigError("stream queues are always durable")
        if spec.single_active_consumer:
            raise QueueConfigError("streams have no single active consumer on RabbitMQ 3.10")
        if spec.dead_letter_exchange is not None:
            raise QueueConfigError("streams do not dead-letter (--dead-letter-exchange)")
        if spec.max_length is not None:
            raise QueueConfigError("streams have no max length in messages (their retention is "
                                   "by bytes or age)")

    def arguments(self, spec: QueueSettings) -> dict[str, Any]:
        """A stream's replica count is its initial cluster size; a max priority is sent as
        given, for the broker to answer."""
        args: dict[str, Any] = {"x-queue-type": "stream"}
        if spec.quorum_initial_group_size is not None:
            args["x-initial-cluster-size"] = spec.quorum_initial_group_size
        if spec.max_priority is not None:
            args["x-max-priority"] = spec.max_priority
        return args

    def describe(self, queue: Mapping[str, Any]) -> list[str]:
        """Its initial cluster size (the spec's initial group size), when set, then the
        delivery limit."""
        size = queue.get("quorum_initial_group_size")
        return ([f"initial group size {size}"] if size else []) + super().describe(queue)

    def consumer_offset(self) -> str | None:
        """Every consumer reads the log from its first offset."""
        return "first"

    def check_rules(self) -> dict[str, bool]:
        """Repeats are the design: duplicates of either flag do not invalidate."""
        return {"unflagged_duplicates_invalid": False, "flagged_duplicates_invalid": False}

    def depth(self, admin: RabbitAdmin, node: Node, queue: str) -> QueueDepth:
        """Asks the stream's members for their last committed offset."""
        if not admin.queue_exists(node, queue):
            return QueueDepth(False)
        return QueueDepth(True, self.name, last_offset=admin.stream_end(node, queue))

    def proof_without(self, placement: Mapping[str, Any],
                      down: Collection[str]) -> str | None:
        """A stream's drain is proven by its last committed offset as its members report it;
        without every member that is not claimed here."""
        return f"a stream's last offset is not judged without its members ({', '.join(down)})"

    def drained(self, depths: Mapping[str, QueueDepth],
                read_to: Mapping[str, int | None]) -> tuple[bool, str | None]:
        """Complete when some node's drain read up to the last committed offset."""
        if not any(d.exists for d in depths.values()):
            return True, "the stream no longer exists on any node"
        end = max((d.last_offset for d in depths.values() if d.last_offset is not None),
                  default=-1)
        done = [n for n, o in read_to.items() if end < 0 or (o is not None and o >= end)]
        if done:
            return True, f"{', '.join(done)} read the stream to its last offset {end}"
        return False, f"no node's drain reached the stream's last committed offset {end}"
