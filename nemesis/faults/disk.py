"""Disk faults: a power loss on the targets (issue 32).

`PowerLoss` SIGKILLs the targets' brokers, as `kill` does, then tells each target's layer
(clusters.lazyfs, under the node's data directory: the cluster's `UnsyncedDisks` ability) to
drop every write the broker had not synced; the nodes stay down for the fault's duration and
its stop boots them again, all at once, as `kill`'s does. The start's value records what each
node's layer dropped (`dropped`: bytes, files, namespace changes, the first few paths), which
checkers.efficacy reads into the fault's entry. A cluster without the layer cannot host it: the
spec refuses it before a cluster starts (backend.unsynced_fs), and `preflight` says so again.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from clusters.base import Broker, Node, UnsyncedDisks
from nemesis.errors import FaultError, FaultUnsupported
from nemesis.faults.process import kill, start_all_down
from nemesis.healers import FaultBase
from nemesis.protocol import Description, FaultContext, FaultInfo, on_nodes, raise_for_errors

log = logging.getLogger(__name__)

# How many of a node's dropped files the op's value names (the counts are always whole).
PATHS_KEPT = 10


def dropped_summary(report: dict[str, Any]) -> dict[str, Any]:
    """Takes what a node's layer said it dropped (UnsyncedDisks.power_loss). Returns the part
    the history keeps: its totals and at most PATHS_KEPT paths with their bytes."""
    paths = list(report.get("paths") or [])
    return {"bytes": int(report.get("bytes") or 0), "files": int(report.get("files") or 0),
            "namespace": len(report.get("namespace") or []),
            "paths": [{"path": p.get("path"), "bytes": p.get("bytes"),
                       "vanished": p.get("size_after") is None} for p in paths[:PATHS_KEPT]]}


def kill_for_good(broker: Broker, node: Node) -> str:
    """Takes the broker and a node. Kills its beam with SIGKILL and makes sure it is gone: a
    layer must never drop writes under a broker still running. Returns "killed"; raises
    FaultError when the beam survived."""
    kill(broker, node)
    if broker.beam_pid(node) is not None:
        raise FaultError(f"{node.name}'s broker still runs after SIGKILL: no power loss")
    return "killed"


def _layers(ctx: FaultContext) -> UnsyncedDisks:
    if not isinstance(ctx.cluster, UnsyncedDisks) or not ctx.cluster.unsynced:
        raise FaultUnsupported("power-loss needs each node's data directory on the unsynced "
                               "layer (backend.unsynced_fs, local backend only)")
    return ctx.cluster


class PowerLoss(FaultBase):
    """Kills the targets' brokers and drops their unsynced writes on start; boots them on stop."""

    def __init__(self, info: FaultInfo) -> None:
        self.info = info
        self._hit: list[Node] = []

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. Raises FaultUnsupported when the cluster has no unsynced layer."""
        _layers(ctx)

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Kills the targets at once, then drops what each
        one's layer holds unsynced. Returns the targets and what each layer dropped. Raises
        FaultError naming the nodes where a kill or a power loss failed."""
        layers = _layers(ctx)
        targets = ctx.targets(rng)
        self._hit = targets  # stop boots every target, whatever failed here
        _, errors = on_nodes(targets, lambda node: kill_for_good(ctx.broker, node))
        raise_for_errors(f"{self.info.name} kill", errors)
        reports, errors = on_nodes(targets, layers.power_loss)
        raise_for_errors(self.info.name, errors)
        dropped = {n.name: dropped_summary(reports[n.name]) for n in targets}
        log.info("power loss on %s dropped %s", [n.name for n in targets],
                 {k: (v["bytes"], v["files"]) for k, v in dropped.items()})
        return {"fault": self.info.name, "nodes": [n.name for n in targets], "dropped": dropped}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Boots the nodes hit, all at once. Returns what each did."""
        hit, self._hit = self._hit, []
        outcome = start_all_down(ctx, hit, f"{self.info.name} restart")
        return {"fault": self.info.name, "nodes": [n.name for n in hit], "outcome": outcome}
