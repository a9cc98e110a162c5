"""Disk faults: a power loss on the targets, and a corruption of a queue's files (issue 32).

`PowerLoss` SIGKILLs the targets' brokers, as `kill` does, then tells each target's layer
(clusters.lazyfs, under the node's data directory: the cluster's `UnsyncedDisks` ability) to
drop every write the broker had not synced; the nodes stay down for the fault's duration and
its stop boots them again, all at once, as `kill`'s does. The start's value records what each
node's layer dropped (`dropped`: bytes, files, namespace changes, the first few paths, each
with its ages at the cut: when it was written, fsynced and made durable, and the files written
since that it kept), which checkers.efficacy reads into the fault's entry. A cluster without the layer cannot host it: the
spec refuses it before a cluster starts (backend.unsynced_fs), and `preflight` says so again.

`DiskCorrupt` is Jepsen's file nemesis (jepsen.nemesis.file) aimed at one queue: it SIGKILLs
the targets' brokers, lists each one's data directory, picks one of the queue's own files and
flips bits of a chunk of it, or cuts its tail (nemesis.faults.corrupt: which files, how, all
from the run's seed), and records the damage (`damaged`: files, bytes, bits, each path with
its offsets), which checkers.efficacy reads into the fault's entry; its stop boots the nodes
again, which then recover, repair from their peers, or refuse to boot. A node where no file of
the queue was found is recorded with nothing damaged (a weak fault). Only a minority may be hit
(FaultInfo.minority_only) and only where the broker says where its data is (clusters.base.
DataDirs; the local backend, whose nodes run the damage with this host's python3).
"""

from __future__ import annotations

import logging
import random
from typing import Any

from clusters.base import Broker, DataDirs, Node, UnsyncedDisks
from nemesis.errors import FaultError, FaultUnsupported
from nemesis.faults.corrupt import (
    corrupt_command,
    damaged_summary,
    listing_command,
    parse_listing,
    plan_damage,
    queue_files,
    ra_dirs,
)
from nemesis.faults.process import kill, start_all_down
from nemesis.healers import FaultBase
from nemesis.protocol import Description, FaultContext, FaultInfo, on_nodes, raise_for_errors

log = logging.getLogger(__name__)

# How many of a node's dropped files the op's value names (the counts are always whole).
PATHS_KEPT = 10


def ages_of(timing: Any) -> dict[str, Any]:
    """Takes a file's timing as the layer reports it (clusters.lazyfs.report.Timing.to_dict:
    {event: {"age_s", "at"}}; anything else: none known). Returns each event's age at the cut as
    `<event>_s` (e.g. "first_unsynced_s": 33.2, "last_sync_s"), and `durable_by` when said."""
    if not isinstance(timing, dict):
        return {}
    out: dict[str, Any] = {f"{event}_s": when["age_s"] for event, when in timing.items()
                           if isinstance(when, dict) and when.get("age_s") is not None}
    durable = timing.get("durable")
    if isinstance(durable, dict) and durable.get("by"):
        out["durable_by"] = str(durable["by"])
    return out


def dropped_summary(report: dict[str, Any]) -> dict[str, Any]:
    """Takes what a node's layer said it dropped (UnsyncedDisks.power_loss). Returns the part
    the history keeps: its totals, at most PATHS_KEPT paths with their bytes and their ages at
    the cut (`ages_of`: when each was first and last written unsynced, last fsynced, its
    directory fsynced, its data last durable), the oldest dropped write's age
    (`oldest_unsynced_s`), the cut's wall-clock time (`cut_at`), how many files written since
    were kept whole (`kept`) and the PATHS_KEPT latest written of them with their ages
    (`kept_paths`), and the layer's durability model in words (e.g. "ext4, writeback 30 s");
    each of the last five only when the layer said it (an older layer said none)."""
    paths = list(report.get("paths") or [])
    said = {key: report[key] for key in ("model", "oldest_unsynced_s", "cut_at")
            if report.get(key) is not None and report.get(key) != ""}
    kept = report.get("kept")
    if isinstance(kept, list):
        said["kept"] = len(kept)
        said["kept_paths"] = [{"path": k.get("path"), "size": k.get("size"),
                               **ages_of(k.get("timing"))} for k in kept[:PATHS_KEPT]]
    return {"bytes": int(report.get("bytes") or 0), "files": int(report.get("files") or 0),
            "namespace": len(report.get("namespace") or []),
            "paths": [{"path": p.get("path"), "bytes": p.get("bytes"),
                       "vanished": p.get("size_after") is None, **ages_of(p.get("timing"))}
                      for p in paths[:PATHS_KEPT]],
            **said}


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


# A listing or a corruption may take longer than one iptables command: the data directory is big.
FILE_TIMEOUT_S = 60.0


def _data_dirs(ctx: FaultContext) -> DataDirs:
    if not isinstance(ctx.broker, DataDirs):
        raise FaultUnsupported("disk-corrupt needs a broker that says where each node keeps its "
                               "data (clusters.base.DataDirs)")
    return ctx.broker


def corrupt_node(ctx: FaultContext, node: Node, root: str, rng: random.Random) -> dict[str, Any]:
    """Takes the context, a node whose broker is down, its data directory and a Random. Damages
    one of the queue's files there (nemesis.faults.corrupt). Returns the record: how many of
    the queue's files were found (`candidates`) and what was damaged (none when none was
    found). Raises RemoteError when the listing or the damage failed."""
    opts = ctx.options
    queue = ctx.queue_name()
    listing = parse_listing(node.remote.run(listing_command(root), timeout=FILE_TIMEOUT_S).stdout)
    configs = {d: node.remote.read_file(f"{root}/{d}/config")
               for d in ra_dirs(listing, queue)}
    files = queue_files(listing, queue, configs)
    damage = plan_damage(files, opts.corrupt_mode, opts.corrupt_bytes,
                         opts.corrupt_probability, rng)
    if damage is not None:
        node.remote.run(corrupt_command(damage, root), timeout=FILE_TIMEOUT_S)
    done = damaged_summary([damage] if damage is not None else [])
    return {"candidates": len(files), **done}


class DiskCorrupt(FaultBase):
    """Kills the targets' brokers and damages one of the queue's files on each; boots them on
    stop."""

    def __init__(self, info: FaultInfo) -> None:
        self.info = info
        self._hit: list[Node] = []

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. Raises FaultUnsupported when the broker keeps no known data
        directory, FaultError when there is no queue."""
        _data_dirs(ctx)
        ctx.queue_name()

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Kills the targets at once, then damages a file of
        the queue's on each (each node's damage drawn from its own seed, taken from `rng` in
        node order). Returns the targets, the mode and what was damaged on each. Raises
        FaultError naming the nodes where a kill or a damage failed."""
        dirs = _data_dirs(ctx)
        targets = ctx.targets(rng)
        seeds = {n.name: rng.getrandbits(64) for n in targets}
        self._hit = targets  # stop boots every target, whatever failed here
        _, errors = on_nodes(targets, lambda node: kill_for_good(ctx.broker, node))
        raise_for_errors(f"{self.info.name} kill", errors)
        done, errors = on_nodes(targets, lambda node: corrupt_node(
            ctx, node, dirs.data_dir(node), random.Random(seeds[node.name])))
        raise_for_errors(self.info.name, errors)
        damaged = {n.name: done[n.name] for n in targets}
        log.info("disk corruption on %s damaged %s", [n.name for n in targets],
                 {k: (v["files"], v["bytes"]) for k, v in damaged.items()})
        return {"fault": self.info.name, "nodes": [n.name for n in targets],
                "mode": ctx.options.corrupt_mode, "damaged": damaged}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Boots the nodes hit, all at once. Returns what each did."""
        hit, self._hit = self._hit, []
        outcome = start_all_down(ctx, hit, f"{self.info.name} restart")
        return {"fault": self.info.name, "nodes": [n.name for n in hit], "outcome": outcome}
