"""Waiting for the cluster to be whole again after the faults, and mending nodes that are not.

After the final heal a node can stay broken: hung in boot after a
pause_minority heal, or running alone after SIGCONT with its own view of the
cluster, or left partitioned under `ignore`. `recover` polls the health check
and, for a node still unhealthy after a grace period, escalates: first
stop_app/start_app, then kill and restart. Every action is logged and recorded
in the history as a harness event (f "recover-node"), so the verdict can be
read beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkers.liveness import LivenessBound
from clusters.base import Node
from clusters.rabbitmq import BrokerError, NodeStatus, RabbitBroker
from clusters.remote import RemoteError
from history import HARNESS, HistoryWriter, Op

log = logging.getLogger(__name__)

ACTIONS = ("restart-app", "kill-restart")
SETTLE_S = 10.0
MIN_GRACE_S = 30.0


def grace_s(net_ticktime_s: float) -> float:
    """Takes the broker's net_ticktime (s). Returns how long recovery lets a node stay unhealthy
    before it mends it: partition detection takes up to net_ticktime, and a node needs time to
    rejoin after it (the liveness checker's bound counts on the same patience)."""
    return max(MIN_GRACE_S, 3.0 * net_ticktime_s)


def liveness_bound(net_ticktime_s: float, recovery_timeout_s: float,
                   source: str = "test.json") -> LivenessBound:
    """Takes the broker's net_ticktime and the recovery timeout (s) and where they were read.
    Returns the bound the liveness check judges by (checkers.liveness: failure detection plus
    this module's grace, at most the recovery timeout): what the check reads from test.json and
    what the runner keeps the workload running after the last heal for."""
    return LivenessBound(net_ticktime_s, grace_s(net_ticktime_s), recovery_timeout_s, source)


def booting(status: NodeStatus) -> bool:
    """Returns whether the node answers but its rabbit app is not running (booting, or paused
    by pause_minority): past the grace period such a node is stuck, and only a kill mends it."""
    return "app to be running" in (status.error or "")


@dataclass
class RecoveryReport:
    """How recovery went: healthy in the end or not, the time it took, what was done."""

    healthy: bool = False
    seconds: float = 0.0
    actions: list[dict[str, Any]] = field(default_factory=list)
    last_status: list[dict[str, object]] = field(default_factory=list)


def partition_peers(statuses: Sequence[NodeStatus]) -> dict[str, set[str]]:
    """Takes every node's status. Returns, per Erlang node name, the peers it is partitioned from,
    by the union of every view: each node reports the partitions it knows of anywhere in the
    cluster, so a node can list a partition it takes no part in."""
    peers: dict[str, set[str]] = {}
    for s in statuses:
        for a, others in s.partitions.items():
            for b in others:
                peers.setdefault(a, set()).add(b)
                peers.setdefault(b, set()).add(a)
    return peers


def unhealthy_nodes(statuses: Sequence[NodeStatus], nodes: Sequence[Node],
                    mended: Mapping[str, int] | None = None) -> list[Node]:
    """Takes every node's status (same order as nodes) and how often each node was mended.
    Returns the nodes that are not whole, the one to mend first first.

    A node is unhealthy when it does not answer, takes part in a partition, or
    does not see every node running. Order: nodes not answering; then parties
    to a partition, the one cut from the most peers first (under `ignore` the
    minority side; where two nodes are cut only from each other, the one mended
    less often, so that a stale record on one side is mended next); then nodes
    missing peers, the one seeing fewest first.
    """
    mended = mended or {}
    want = frozenset(n.erlang_name for n in nodes)
    peers = partition_peers(statuses)
    ranked = []
    for i, (s, n) in enumerate(zip(statuses, nodes, strict=True)):
        cut = len(peers.get(n.erlang_name, ()))
        if not s.running:
            rank = (0, 0)
        elif cut:
            rank = (1, -cut)
        elif not s.running_nodes >= want:
            rank = (2, len(s.running_nodes))
        else:
            continue
        ranked.append((rank, mended.get(n.name, 0), i, n))
    return [n for *_, n in sorted(ranked, key=lambda x: x[:3])]


def recover(
    broker: RabbitBroker, history: HistoryWriter, timeout: float, grace: float,
) -> RecoveryReport:
    """Waits until the cluster is healthy, mending nodes that stay broken past `grace` seconds.

    Takes the broker, the history, the overall timeout and the grace period.
    Returns a RecoveryReport; never raises for a broker that will not mend.
    """
    report = RecoveryReport()
    start = time.monotonic()
    deadline = start + timeout
    level: dict[str, int] = {}
    bad_since: dict[str, float] = {}
    settle_until = 0.0
    statuses: list[NodeStatus] = []
    while time.monotonic() < deadline:
        statuses = broker.statuses()
        bad = unhealthy_nodes(statuses, broker.nodes, level)
        if not bad:
            report.healthy = True
            break
        now = time.monotonic()
        for name in list(bad_since):
            if name not in {b.name for b in bad}:
                del bad_since[name]
        for n in bad:
            bad_since.setdefault(n.name, now)
        worst = bad[0]
        if now - bad_since[worst.name] >= grace and now >= settle_until:
            status = next(s for s in statuses if s.node == worst.erlang_name)
            step = level.get(worst.name, 0)
            if step == 0 and booting(status):
                step = 1  # stop_app would hang on a node stuck in boot
            action = ACTIONS[min(step, len(ACTIONS) - 1)]
            level[worst.name] = step + 1
            _mend(broker, history, worst, action, _reason(status), report)
            # The mended node gets a fresh grace, and the others a short settling time: the
            # mend may be what heals them.
            bad_since[worst.name] = time.monotonic()
            settle_until = time.monotonic() + min(grace, SETTLE_S)
            continue
        time.sleep(2.0)
    report.seconds = time.monotonic() - start
    report.last_status = [
        {"node": s.node, "running": s.running, "running_nodes": sorted(s.running_nodes),
         "partitions": s.partitions, "error": s.error}
        for s in statuses
    ]
    if not report.healthy:
        log.error("cluster still unhealthy after %.0fs: %s", report.seconds, report.last_status)
    return report


def _reason(status: NodeStatus) -> str:
    return status.error or (
        f"partitions {status.partitions}" if status.partitions
        else f"sees {sorted(status.running_nodes)}"
    )


def _mend(
    broker: RabbitBroker, history: HistoryWriter, node: Node, action: str, reason: str,
    report: RecoveryReport, f: str = "recover-node",
) -> None:
    log.warning("recovering %s by %s: %s", node.name, action, reason)
    t0 = time.monotonic()
    outcome = "done"
    try:
        if action == "restart-app":
            broker.resume(node)  # a paused beam answers nothing; SIGCONT is harmless otherwise
            broker.restart_app(node)
        else:
            broker.kill(node)
            broker.start(node)
    except (RemoteError, BrokerError) as e:
        outcome = f"failed: {e}"[:300]
        log.warning("recovery of %s by %s failed: %s", node.name, action, e)
    # `seconds`: how long the action took, so a reader knows when it began (the op is recorded
    # at its end): what the broker logged from then on is the harness's doing, not a fault's.
    entry = {"node": node.name, "action": action, "reason": reason[:300], "outcome": outcome,
             "seconds": round(time.monotonic() - t0, 3)}
    report.actions.append(entry)
    history.append(Op(type="info", process=HARNESS, f=f, value=entry, node=node.name))


def restart_each(
    broker: RabbitBroker, history: HistoryWriter, reason: str, timeout: float, grace: float,
) -> RecoveryReport:
    """Mends a queue the whole cluster cannot serve although every node is healthy (a classic
    mirrored queue can answer "timeout" on every node for minutes after an autoheal): restarts
    each node's app in turn, each recorded as f "recover-queue", then waits for the cluster to
    be whole again. Takes the broker, history, reason, recovery timeout and grace. Returns what
    was done and whether the cluster ended whole."""
    report = RecoveryReport()
    for node in broker.nodes:
        _mend(broker, history, node, "restart-app", reason, report, f="recover-queue")
    after = recover(broker, history, timeout, grace)
    after.actions[:0] = report.actions
    return after
