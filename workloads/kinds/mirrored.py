"""A classic queue mirrored by an ha-mode policy: a master and its mirrors.

RabbitMQ documents that such a queue can lose confirmed messages: autoheal
discarding the losing side, promotion of an unsynchronised mirror, a master
failing while a new mirror is still empty. The policy's settings are checked
here and applied by the workload before the queue is declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads.kinds.base import QueueConfigError, QueueKind, QueueSettings

HA_MODES: tuple[str, ...] = ("all", "exactly", "nodes")
HA_SYNC_MODES: tuple[str, ...] = ("automatic", "manual")
HA_PROMOTE: tuple[str, ...] = ("when-synced", "always")
MASTER_LOCATORS: tuple[str, ...] = ("min-masters", "client-local", "random")


def one_of(label: str, value: object, allowed: tuple[str, ...]) -> None:
    """Raises QueueConfigError unless value is one of allowed."""
    if value not in allowed:
        raise QueueConfigError(f"unknown {label} {value!r}; known: {', '.join(allowed)}")


class Mirrored(QueueKind):
    """A classic queue with a mirroring policy (ha-mode, ha-params, ha-sync-mode, promotion)."""

    name = "mirrored"
    summary = "a classic queue mirrored by an ha-mode policy"
    own_fields = ("ha_mode", "ha_params", "ha_sync_mode", "ha_promote_on_shutdown",
                  "ha_promote_on_failure", "queue_master_locator")

    def validate(self, spec: QueueSettings, node_count: int) -> None:
        """Checks the mirroring settings. Raises QueueConfigError."""
        one_of("ha-mode", spec.ha_mode, HA_MODES)
        one_of("ha-sync-mode", spec.ha_sync_mode, HA_SYNC_MODES)
        for label, v in (("ha-promote-on-shutdown", spec.ha_promote_on_shutdown),
                         ("ha-promote-on-failure", spec.ha_promote_on_failure)):
            if v is not None:
                one_of(label, v, HA_PROMOTE)
        if spec.queue_master_locator is not None:
            one_of("queue-master-locator", spec.queue_master_locator, MASTER_LOCATORS)
        if spec.ha_mode == "exactly" and not (
            isinstance(spec.ha_params, int) and spec.ha_params >= 1
        ):
            raise QueueConfigError("ha-mode exactly needs ha-params, a count >= 1")
        if spec.ha_mode == "nodes" and not (isinstance(spec.ha_params, list) and spec.ha_params):
            raise QueueConfigError("ha-mode nodes needs ha-params, a list of node names")
        if spec.ha_mode == "all" and spec.ha_params is not None:
            raise QueueConfigError("ha-mode all takes no ha-params")

    def arguments(self, spec: QueueSettings) -> dict[str, Any]:
        """A mirrored queue is declared classic; the policy mirrors it."""
        args = super().arguments(spec)
        args["x-queue-type"] = "classic"
        return args

    def describe(self, queue: Mapping[str, Any]) -> list[str]:
        """The delivery limit, then its mirroring policy: ha-mode and params, sync mode,
        promotion, master locator."""
        params = queue.get("ha_params")
        shown = (", ".join(str(v) for v in params) if isinstance(params, list | tuple)
                 else str(params)) if params else ""
        parts = super().describe(queue)
        parts += [f"ha-mode {queue.get('ha_mode')}" + (f" {shown}" if shown else ""),
                  f"ha-sync-mode {queue.get('ha_sync_mode')}"]
        for k in ("ha_promote_on_shutdown", "ha_promote_on_failure", "queue_master_locator"):
            if queue.get(k):
                parts.append(f"{k.replace('_', '-')} {queue[k]}")
        return parts

    def policy(self, spec: QueueSettings, erlang_names: Mapping[str, str]) -> dict[str, Any] | None:
        """Returns the ha policy; ha-params of ha-mode nodes may name nodes by short name."""
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
