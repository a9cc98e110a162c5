"""The cluster settled before the faults (issue 32): once the cluster is set up, every node's
unsynced layer makes what the node wrote durable (clusters.lazyfs: `LazyFS.sync`, as sync(2)
would on ext4), as if the cluster had run long enough for the kernel's writeback.

Why: RabbitMQ writes some of its files at setup without fsync (the enabled feature flags, a
virtual host's `.config` and `.vhost`, ...), and the layer keeps them unsynced for the writeback
expiry (30 s) and the commit after it. A power loss some 20 s into the main phase then falls
inside that window and tests "a power cut within half a minute of the cluster's creation"
rather than what its scenario says: 3.10.8's classic-power-loss-node (seed 4001) never booted
again, its vhost's `.config` dropped; 4.3.6's quorum-power-loss-all lost two nodes' feature flags
written while they joined. A real host whose cluster had run for a minute would have written
all of that back. `--young-cluster` (backend.settle_layers false) keeps the window on purpose.

Each node's settle is a harness observation in the history, `f "layer-settled"`
(history.LAYER_SETTLED), `node` the node, with what its layer wrote back (`settled_value`), and
a log line, "lazyfs: settled n1 (N bytes in M files written back)".
"""

from __future__ import annotations

import logging
from typing import Any

from clusters.base import Cluster, Node, UnsyncedDisks
from history import HARNESS, LAYER_SETTLED, Op, Recorder

log = logging.getLogger(__name__)

PATHS_KEPT = 50  # the files of a settle the history names (the others are counted)


def settled_value(node: Node, report: dict[str, Any]) -> dict[str, Any]:
    """Takes a node and what its layer wrote back (UnsyncedDisks.settle: SyncedReport.to_dict).
    Returns the `layer-settled` observation's value: `node`, `bytes`, `files`, `namespace` (the
    namespace changes it committed), `model` (the layer's durability model in words) and `paths`
    (at most PATHS_KEPT files, by path, each `{"path", "bytes"}`)."""
    paths = list(report.get("paths") or [])
    return {"node": node.name, "bytes": int(report.get("bytes") or 0),
            "files": int(report.get("files") or 0),
            "namespace": len(report.get("namespace") or []),
            "model": str(report.get("model") or ""),
            "paths": [{"path": p.get("path"), "bytes": p.get("bytes")}
                      for p in paths[:PATHS_KEPT]]}


def settle_layers(cluster: Cluster, history: Recorder) -> dict[str, dict[str, int]]:
    """Takes the run's cluster and its history. Settles every node's unsynced layer, in node
    order, recording a `layer-settled` observation and a log line for each. Returns, per node,
    what was written back (`bytes`, `files`, `namespace`; test.json's `settled`), {} when the
    cluster has no layers. Raises ClusterError (LazyFSError) when a layer cannot settle: a run
    whose layer does not answer has no power loss to test."""
    if not isinstance(cluster, UnsyncedDisks) or not cluster.unsynced:
        return {}
    out: dict[str, dict[str, int]] = {}
    for node in cluster.nodes:
        value = settled_value(node, cluster.settle(node))
        log.info("lazyfs: settled %s (%d bytes in %d files written back, %d namespace changes "
                 "committed)", node.name, value["bytes"], value["files"], value["namespace"])
        history.append(Op(type="info", process=HARNESS, f=LAYER_SETTLED, node=node.name,
                          value=value))
        out[node.name] = {k: value[k] for k in ("bytes", "files", "namespace")}
    return out
