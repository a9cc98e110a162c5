"""What a queue kind is: everything about a queue that differs by kind, in one small class.

`QueueKind` holds the defaults (a durable queue declared with an
x-queue-type, consumed destructively, whose broker-side depth must reach 0
ready and 0 unacknowledged); each kind's module overrides what differs. The
rest of the code asks the spec's kind (`workloads.kinds.kind_of`) and never
tests a kind's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from clusters.rabbitmq_admin import QueueDepth
from workloads.errors import WorkloadError

if TYPE_CHECKING:
    from clusters.base import Node
    from clusters.rabbitmq_admin import RabbitAdmin


class QueueConfigError(WorkloadError, ValueError):
    """A queue setting the broker would reject or that makes no sense."""


class QueueSettings(Protocol):
    """What a kind reads of the queue spec (workloads.queue_spec.QueueSpec is one; the kinds do
    not import it, so that the spec may ask its kind)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def durable(self) -> bool: ...
    @property
    def quorum_initial_group_size(self) -> int | None: ...
    @property
    def delivery_limit(self) -> int | None: ...
    @property
    def ha_mode(self) -> str: ...
    @property
    def ha_params(self) -> int | list[str] | None: ...
    @property
    def ha_sync_mode(self) -> str: ...
    @property
    def ha_promote_on_shutdown(self) -> str | None: ...
    @property
    def ha_promote_on_failure(self) -> str | None: ...
    @property
    def queue_master_locator(self) -> str | None: ...
    @property
    def single_active_consumer(self) -> bool: ...

    @property
    def max_length(self) -> int | None: ...

    @property
    def overflow(self) -> str | None: ...

    @property
    def dead_letter_exchange(self) -> str | None: ...

    @property
    def delayed_retry_type(self) -> str | None: ...

    @property
    def delayed_retry_min_ms(self) -> int | None: ...

    @property
    def delayed_retry_max_ms(self) -> int | None: ...

    @property
    def consumer_disconnected_timeout_ms(self) -> int | None: ...

    @property
    def consumer_timeout_ms(self) -> int | None: ...

    @property
    def max_priority(self) -> int | None: ...


class QueueKind:
    """A kind of queue. Subclasses set `name` and `summary` and override what differs."""

    name = ""
    summary = ""
    # Every consumer reads every message (a log, not a queue): repeats are by design.
    reads_whole_log = False
    # The least prefetch its consumers may ask for (0: unlimited is allowed).
    min_prefetch = 0
    # It keeps replicas on other nodes besides its leader (the `follower` and `followers`
    # targets have something to hit).
    replicated = True
    # It takes a delivery limit (x-delivery-limit): a message returned more often is dropped,
    # or dead-lettered (workloads.queue_spec.dead_lettering).
    takes_delivery_limit = False
    # It takes delayed retry (x-delayed-retry-type, -min, -max; RabbitMQ 4.3 quorum queues).
    takes_delayed_retry = False
    # Its messages' priority property orders their delivery without an x-argument of the
    # harness's, as the priority check models (a quorum queue's priorities are always on; a
    # classic queue's need x-max-priority, which --max-priority only declares: the check does
    # not model a classic queue's priorities).
    takes_priorities = False
    # The QueueSpec fields only this kind reads (a mirrored queue's policy settings); other
    # kinds ignore them (workloads.queue_spec.settings_that_matter).
    own_fields: tuple[str, ...] = ()

    def validate(self, spec: QueueSettings, node_count: int) -> None:
        """Takes the queue spec and the cluster size. Raises QueueConfigError for a setting this
        kind does not take."""
        for field, label in (("ha_params", "ha-params"),
                             ("ha_promote_on_shutdown", "ha-promote-on-shutdown"),
                             ("ha_promote_on_failure", "ha-promote-on-failure"),
                             ("queue_master_locator", "queue-master-locator")):
            if getattr(spec, field) is not None:
                raise QueueConfigError(f"{label} applies to mirrored queues, not {self.name}")

    def arguments(self, spec: QueueSettings) -> dict[str, Any]:
        """Takes the queue spec. Returns the x-arguments of its queue.declare."""
        args: dict[str, Any] = {"x-queue-type": self.name}
        if spec.single_active_consumer:
            args["x-single-active-consumer"] = True
        if spec.max_length is not None:
            args["x-max-length"] = spec.max_length
        if spec.overflow is not None:
            args["x-overflow"] = spec.overflow
        if spec.max_priority is not None:
            args["x-max-priority"] = spec.max_priority
        if spec.consumer_timeout_ms is not None:
            args["x-consumer-timeout"] = spec.consumer_timeout_ms
        return args

    def policy(self, spec: QueueSettings, erlang_names: Mapping[str, str]) -> dict[str, Any] | None:
        """Takes the queue spec and short -> Erlang node names. Returns the definition of the
        policy the queue needs, or None."""
        return None

    def describe(self, queue: Mapping[str, Any]) -> list[str]:
        """Takes a stored spec's queue section (test.json's; keys may be missing). Returns the
        phrases a report shows for the settings of a queue of this kind (here: the delivery
        limit, the max length with its overflow and the max priority, when set)."""
        limit, length = queue.get("delivery_limit"), queue.get("max_length")
        top = queue.get("max_priority")
        return (([f"delivery limit {limit}"] if limit is not None else [])
                + ([f"max length {length} ({queue.get('overflow') or 'drop-head'})"]
                   if length is not None else [])
                + ([f"x-max-priority {top}"] if top is not None else []))

    def consumer_offset(self) -> str | None:
        """Returns where a consumer starts reading (x-stream-offset), None for a queue."""
        return None

    def check_rules(self) -> dict[str, bool]:
        """Returns the check settings this kind's semantics impose (CheckOptions field -> value)."""
        return {}

    def depth(self, admin: RabbitAdmin, node: Node, queue: str) -> QueueDepth:
        """Asks one node, freshly, what the queue holds: its record, then its process (a mirrored
        queue's master). Returns the QueueDepth (exists False when the queue's record is gone).
        Raises RemoteError or BrokerError when the queue does not answer with numbers: never a
        silent 0, and never "absent" for a queue whose process hangs."""
        depth = admin.classic_depth(node, queue)
        return dataclasses.replace(depth, type=self.name) if depth.exists else depth

    def drained(self, depths: Mapping[str, QueueDepth],
                read_to: Mapping[str, int | None]) -> tuple[bool, str | None]:
        """Takes every node's depth after a drain pass (all answered) and the highest offset each
        node's drain read. Returns (whether the drain has provably read everything, why not)."""
        if not any(d.exists for d in depths.values()):
            return True, "the queue no longer exists on any node"
        full = {n: d for n, d in depths.items() if not d.empty}
        if full:
            said = "; ".join(f"{n}: {d.ready} ready, {d.unacked} unacked" for n, d in full.items())
            return False, f"the queue still holds messages ({said})"
        return True, None

    def proof_without(self, placement: Mapping[str, Any],
                      down: Collection[str]) -> str | None:
        """Takes where the queue lives (clusters.rabbitmq_admin.queue_placement, asked of the
        nodes that serve) and the nodes that would not boot again. Returns None when the
        serving nodes' depths can prove the queue empty without those nodes, else why not.

        A classic queue (a mirrored queue's master) answers from its home node alone: the
        answer proves it empty when its home serves, and nothing can when its home is down."""
        home = placement.get("leader")
        if not home:
            return "no serving node says where the queue lives"
        if home in down:
            return f"its home node {home} did not boot: what it holds cannot be read"
        return None
