"""Waiting for the cluster to be whole again after the faults, and mending nodes that are not.

After the final heal a node can stay broken: hung in boot after a
pause_minority heal, or running alone after SIGCONT with its own view of the
cluster, or left partitioned under `ignore`. `recover` polls the health check
and, for a node still unhealthy after a grace period, escalates: first
stop_app/start_app, then kill and restart. Every action is logged and recorded
in the history as a harness event (f "recover-node"), so the verdict can be
read beside it. A node whose boot failed alike after REPEATS kill-restarts in a
row, while every other node is whole, is given up on then rather than at the
timeout (a corrupted data directory fails every boot the same way): what more
kills would have shown is already in its logs (harness.boot_logs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkers.liveness import LivenessBound
from clusters.base import Node
from clusters.rabbitmq import BrokerError, NodeStatus, RabbitBroker
from clusters.remote import RemoteError
from harness.boot_logs import failure_since
from history import HARNESS, HistoryWriter, Op

log = logging.getLogger(__name__)

ACTIONS = ("restart-app", "kill-restart")
SETTLE_S = 10.0
MIN_GRACE_S = 30.0
# Kill-restarts in a row whose boots failed alike, after which a node is given up on.
REPEATS = 2


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
    # The nodes given up on before the timeout, each with why.
    gave_up: dict[str, str] = field(default_factory=dict)


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


def whole_but(statuses: Sequence[NodeStatus], nodes: Sequence[Node], down: Sequence[Node]
              ) -> bool:
    """Takes every node's status (same order as nodes) and some nodes. Returns whether those
    nodes are all that is wrong: they do not run, and every other node runs, takes no part in
    a partition and sees every node but them."""
    peers = partition_peers(statuses)
    gone = {n.name for n in down}
    others = frozenset(n.erlang_name for n in nodes if n.name not in gone)
    return bool(gone) and all(
        not s.running if n.name in gone
        else s.running and not peers.get(n.erlang_name) and s.running_nodes >= others
        for s, n in zip(statuses, nodes, strict=True))


def same_failure(failures: Sequence[tuple[str, ...]]) -> bool:
    """Takes the boot failures of a node's kill-restarts in a row (`failure_since`). Returns
    whether the last REPEATS each named one, and the same."""
    last = failures[-REPEATS:]
    return len(last) == REPEATS and bool(last[-1]) and all(f == last[-1] for f in last)


def recover(
    broker: RabbitBroker, history: HistoryWriter, timeout: float, grace: float,
    read_logs: Callable[[Node], Mapping[str, str]] | None = None,
) -> RecoveryReport:
    """Waits until the cluster is healthy, mending nodes that stay broken past `grace` seconds.
    Takes the broker, the history, the overall timeout, the grace period and what reads a
    node's logs (RabbitBroker.read_logs; None: every node mended to the timeout): with it, the
    nodes down whose boots each failed alike after REPEATS kill-restarts in a row are given up
    on once every other node is whole (`_give_up`). Returns a RecoveryReport; never raises for
    a broker that will not mend."""
    report = RecoveryReport()
    start = time.monotonic()
    deadline = start + timeout
    level: dict[str, int] = {}
    bad_since: dict[str, float] = {}
    failures: dict[str, list[tuple[str, ...]]] = {}
    settle_until = 0.0
    statuses: list[NodeStatus] = []
    while time.monotonic() < deadline:
        statuses = broker.statuses()
        bad = unhealthy_nodes(statuses, broker.nodes, level)
        if not bad:
            report.healthy = True
            break
        if _give_up(statuses, broker.nodes, failures, report):
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
            if action == "kill-restart" and read_logs is not None:
                _kill_restart(broker, history, worst, _reason(status), report, read_logs,
                              failures.setdefault(worst.name, []))
            else:
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


def _give_up(statuses: Sequence[NodeStatus], nodes: Sequence[Node],
             failures: Mapping[str, Sequence[tuple[str, ...]]], report: RecoveryReport) -> bool:
    """Takes every node's status, the nodes, each node's boot failures after its kill-restarts
    in a row and the report. Returns whether recovery gives up now: the nodes down each failed
    alike (`same_failure`) and every other node is whole without them; each is then in
    `report.gave_up`, with why."""
    down = [n for s, n in zip(statuses, nodes, strict=True) if not s.running]
    if not all(same_failure(failures.get(n.name, ())) for n in down) \
            or not whole_but(statuses, nodes, down):
        return False
    why = f"its boot failed alike after {REPEATS} kill-restarts in a row, every other node whole"
    for n in down:
        report.gave_up[n.name] = why
        log.warning("giving up on %s: %s", n.name, why)
    return True


def _kill_restart(broker: RabbitBroker, history: HistoryWriter, node: Node, reason: str,
                  report: RecoveryReport, read_logs: Callable[[Node], Mapping[str, str]],
                  failures: list[tuple[str, ...]]) -> None:
    """Kills and restarts the node (`_mend`), and keeps in `failures` how its boot failed
    (`failure_since`: what the boot wrote in its logs), or empties it when the boot did not."""
    before = logs_of(read_logs, node)
    if _mend(broker, history, node, "kill-restart", reason, report):
        failures.clear()
    else:
        failures.append(failure_since(before, logs_of(read_logs, node)))


def logs_of(read_logs: Callable[[Node], Mapping[str, str]], node: Node) -> Mapping[str, str]:
    """Takes what reads a node's logs (RabbitBroker.read_logs) and a node. Returns its log
    files' texts by name, empty when they cannot be read (logged)."""
    try:
        return read_logs(node)
    except (RemoteError, OSError) as e:
        log.warning("could not read %s's logs: %s", node.name, e)
        return {}


def _reason(status: NodeStatus) -> str:
    return status.error or (
        f"partitions {status.partitions}" if status.partitions
        else f"sees {sorted(status.running_nodes)}"
    )


def _mend(
    broker: RabbitBroker, history: HistoryWriter, node: Node, action: str, reason: str,
    report: RecoveryReport, f: str = "recover-node",
) -> bool:
    """Mends the node by the action, recorded in the report and the history. Returns whether
    the action went through (the node booted, for a kill-restart)."""
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
    return outcome == "done"


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
