"""Queue configurations under test, as pure data: queue arguments and mirroring policies.

`QueueSpec` says which kind of queue the workload uses (quorum, classic
mirrored via a policy, classic unmirrored, or a stream) and with which
settings; `queue_arguments` and `ha_policy` turn it into what the broker is
given. A stream is a replicated log read over AMQP 0.9.1: consuming does not
remove a message, every consumer reads from the first offset, so every
consumer sees every message (`reads_whole_log`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

QueueType = Literal["quorum", "mirrored", "classic", "stream"]
QUEUE_TYPES: tuple[str, ...] = ("quorum", "mirrored", "classic", "stream")
HA_MODES: tuple[str, ...] = ("all", "exactly", "nodes")
HA_SYNC_MODES: tuple[str, ...] = ("automatic", "manual")
HA_PROMOTE: tuple[str, ...] = ("when-synced", "always")
MASTER_LOCATORS: tuple[str, ...] = ("min-masters", "client-local", "random")


class QueueConfigError(ValueError):
    """A queue setting the broker would reject or that makes no sense."""


@dataclass(frozen=True)
class QueueSpec:
    """The queue the workload publishes to and consumes from."""

    name: str = "jepsen.queue"
    type: QueueType = "quorum"
    durable: bool = True
    # quorum queues (and streams: their initial cluster size)
    quorum_initial_group_size: int | None = None
    delivery_limit: int | None = None
    # classic mirrored queues (applied by policy)
    ha_mode: str = "all"
    ha_params: int | list[str] | None = None
    ha_sync_mode: str = "automatic"
    ha_promote_on_shutdown: str | None = None
    ha_promote_on_failure: str | None = None
    queue_master_locator: str | None = None
    single_active_consumer: bool = False

    def validate(self, node_count: int) -> None:
        """Takes the cluster size. Raises QueueConfigError for an impossible setting."""
        _one_of("queue type", self.type, QUEUE_TYPES)
        if not self.name or len(self.name) > 255:
            raise QueueConfigError("queue name must be 1-255 characters")
        if self.type in ("quorum", "stream") and not self.durable:
            raise QueueConfigError(f"{self.type} queues are always durable")
        if self.type == "stream" and self.single_active_consumer:
            raise QueueConfigError("streams have no single active consumer on RabbitMQ 3.10")
        if self.type == "stream" and self.delivery_limit is not None:
            raise QueueConfigError("streams have no delivery limit")
        if self.quorum_initial_group_size is not None and not (
            1 <= self.quorum_initial_group_size <= node_count
        ):
            raise QueueConfigError(
                f"quorum initial group size must be 1..{node_count}, "
                f"got {self.quorum_initial_group_size}"
            )
        if self.delivery_limit is not None and self.delivery_limit < 0:
            raise QueueConfigError("delivery limit must be >= 0")
        if self.type != "mirrored":
            return
        _one_of("ha-mode", self.ha_mode, HA_MODES)
        _one_of("ha-sync-mode", self.ha_sync_mode, HA_SYNC_MODES)
        for label, v in (("ha-promote-on-shutdown", self.ha_promote_on_shutdown),
                         ("ha-promote-on-failure", self.ha_promote_on_failure)):
            if v is not None:
                _one_of(label, v, HA_PROMOTE)
        if self.queue_master_locator is not None:
            _one_of("queue-master-locator", self.queue_master_locator, MASTER_LOCATORS)
        if self.ha_mode == "exactly" and not (
            isinstance(self.ha_params, int) and self.ha_params >= 1
        ):
            raise QueueConfigError("ha-mode exactly needs ha-params, a count >= 1")
        if self.ha_mode == "nodes" and not (isinstance(self.ha_params, list) and self.ha_params):
            raise QueueConfigError("ha-mode nodes needs ha-params, a list of node names")
        if self.ha_mode == "all" and self.ha_params is not None:
            raise QueueConfigError("ha-mode all takes no ha-params")


def reads_whole_log(spec: QueueSpec) -> bool:
    """Returns whether every consumer of the queue reads every message (a stream)."""
    return spec.type == "stream"


def _one_of(label: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise QueueConfigError(f"unknown {label} {value!r}; known: {', '.join(allowed)}")


def queue_arguments(spec: QueueSpec) -> dict[str, Any]:
    """Takes a QueueSpec. Returns the x-arguments of its queue.declare."""
    args: dict[str, Any] = {}
    if spec.type == "quorum":
        args["x-queue-type"] = "quorum"
        if spec.quorum_initial_group_size is not None:
            args["x-quorum-initial-group-size"] = spec.quorum_initial_group_size
        if spec.delivery_limit is not None:
            args["x-delivery-limit"] = spec.delivery_limit
    elif spec.type == "stream":
        args["x-queue-type"] = "stream"
        if spec.quorum_initial_group_size is not None:
            args["x-initial-cluster-size"] = spec.quorum_initial_group_size
    else:
        args["x-queue-type"] = "classic"
    if spec.single_active_consumer:
        args["x-single-active-consumer"] = True
    return args


def ha_policy(spec: QueueSpec, erlang_names: dict[str, str]) -> dict[str, Any] | None:
    """Takes a QueueSpec and a map of short to Erlang node names.

    Returns the definition of the mirroring policy for a mirrored queue, else None.
    ha-params for ha-mode nodes may name nodes by short name (n1) or Erlang name.
    """
    if spec.type != "mirrored":
        return None
    d: dict[str, Any] = {"ha-mode": spec.ha_mode, "ha-sync-mode": spec.ha_sync_mode}
    if spec.ha_mode == "exactly":
        d["ha-params"] = spec.ha_params
    elif spec.ha_mode == "nodes" and isinstance(spec.ha_params, list):
        d["ha-params"] = [erlang_names.get(n, n) for n in spec.ha_params]
    if spec.ha_promote_on_shutdown:
        d["ha-promote-on-shutdown"] = spec.ha_promote_on_shutdown
    if spec.ha_promote_on_failure:
        d["ha-promote-on-failure"] = spec.ha_promote_on_failure
    if spec.queue_master_locator:
        d["queue-master-locator"] = spec.queue_master_locator
    return d
