"""The queue under test, as pure data: `QueueSpec`, and what its kind makes of it.

`QueueSpec` says which kind of queue the workload uses (quorum, classic
mirrored via a policy, classic unmirrored, or a stream: `type`, a name in
workloads.kinds.KINDS) and with which settings. Everything that differs by
kind lives in that kind's module; the functions here are the spec's view of
it: `queue_arguments` and `ha_policy` (what the broker is given) and
`reads_whole_log` (every consumer sees every message: a stream).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workloads.kinds import KINDS, QueueConfigError, kind_of

QUEUE_TYPES: tuple[str, ...] = tuple(KINDS)
# What a queue at its max length does with a new message (RabbitMQ's x-overflow; both kinds of
# queue take these two; drop-head is the broker's default).
OVERFLOWS: tuple[str, ...] = ("drop-head", "reject-publish")
__all__ = ["OVERFLOWS", "QUEUE_TYPES", "QueueConfigError", "QueueSpec", "ha_policy", "queue_arguments",
           "reads_whole_log"]


@dataclass(frozen=True)
class QueueSpec:
    """The queue the workload publishes to and consumes from."""

    name: str = "jepsen.queue"
    type: str = "quorum"  # a name in workloads.kinds.KINDS
    durable: bool = True
    # quorum queues (and streams: their initial cluster size)
    quorum_initial_group_size: int | None = None
    delivery_limit: int | None = None
    # classic mirrored queues (applied by policy); where unset, RabbitMQ's own defaults (manual
    # synchronisation: a new mirror starts empty and stays so until the old messages are gone)
    ha_mode: str = "all"
    ha_params: int | list[str] | None = None
    ha_sync_mode: str = "manual"
    ha_promote_on_shutdown: str | None = None
    ha_promote_on_failure: str | None = None
    queue_master_locator: str | None = None
    single_active_consumer: bool = False
    # A length limit (x-max-length, messages) and what the broker does at it (x-overflow):
    # drop-head discards the oldest (confirmed messages lost by design), reject-publish nacks.
    max_length: int | None = None
    overflow: str | None = None

    def validate(self, node_count: int) -> None:
        """Takes the cluster size. Raises QueueConfigError for an impossible setting."""
        kind = kind_of(self)
        if not self.name or len(self.name) > 255:
            raise QueueConfigError("queue name must be 1-255 characters")
        if self.quorum_initial_group_size is not None and not (
            1 <= self.quorum_initial_group_size <= node_count
        ):
            raise QueueConfigError(
                f"quorum initial group size must be 1..{node_count}, "
                f"got {self.quorum_initial_group_size}"
            )
        if self.delivery_limit is not None and self.delivery_limit < 0:
            raise QueueConfigError("delivery limit must be >= 0")
        if self.max_length is not None and self.max_length < 1:
            raise QueueConfigError(f"max length must be >= 1 message, got {self.max_length}")
        if self.overflow is not None:
            if self.overflow not in OVERFLOWS:
                raise QueueConfigError(
                    f"unknown overflow {self.overflow!r}; known: {', '.join(OVERFLOWS)}")
            if self.max_length is None:
                raise QueueConfigError("an overflow behaviour needs a max length")
        kind.validate(self, node_count)


def settings_that_matter(spec: QueueSpec) -> dict[str, Any]:
    """Takes a QueueSpec. Returns its fields as data without those only other kinds read (a
    quorum queue has no ha-sync-mode), to tell whether two specs test the same."""
    d = dataclasses.asdict(spec)
    mine = set(kind_of(spec).own_fields)
    for kind in KINDS.values():
        for name in set(kind.own_fields) - mine:
            d.pop(name, None)
    return d


def reads_whole_log(spec: QueueSpec) -> bool:
    """Returns whether every consumer of the queue reads every message (a stream)."""
    return kind_of(spec).reads_whole_log


def queue_arguments(spec: QueueSpec) -> dict[str, Any]:
    """Takes a QueueSpec. Returns the x-arguments of its queue.declare."""
    return kind_of(spec).arguments(spec)


def ha_policy(spec: QueueSpec, erlang_names: dict[str, str]) -> dict[str, Any] | None:
    """Takes a QueueSpec and a map of short to Erlang node names. Returns the definition of the
    policy its kind needs (a mirroring policy for a mirrored queue), else None."""
    return kind_of(spec).policy(spec, erlang_names)
