"""Nodes that would not boot again after the faults: an outcome of the run, with the broker's words.

A power loss can leave a node's data directory in a state its broker refuses
to boot from (RabbitMQ 3.10 on an empty list of enabled feature flags:
`{case_clause,{ok,[]}}`). Recovery (harness.recovery) tries to mend it, as it
mends any node, and gives up at its timeout. Such a node is not a harness
error: it is what the fault did. `record_unbootable` finds each node still not
running when recovery ends, reads its log directory for the boot failure
(harness.boot_logs: the "BOOT FAILED" banner, the error and the frame that raised
it, each with its file and line as the run's nodes/<node>/ copy will hold them),
and records it as a harness observation, `f "node-unrecoverable"` (value:
node, erlang_node, error, where, evidence, tried, status), which the checker
reads into the run section and the fault's effects. The drain then does
without the node (workloads.queue_workload): whether the queue can be proven
empty without it is the queue kind's to say.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from clusters.base import Node
from harness.boot_logs import ERROR, MAX_QUOTE, evidence_of
from harness.recovery import RecoveryReport, logs_of
from history import HARNESS, UNRECOVERABLE, Op, Recorder

log = logging.getLogger(__name__)

class LogReader(Protocol):
    """What reads a node's logs (clusters.rabbitmq.RabbitBroker)."""

    @property
    def nodes(self) -> Sequence[Node]:
        """The cluster's nodes."""
        ...

    def read_logs(self, node: Node) -> dict[str, str]:
        """Takes a node. Returns its log files' texts by name."""
        ...


def _file(e: Mapping[str, str]) -> str:
    return e["at"].rsplit(":", 1)[0]


def observation(node: Node, evidence: Sequence[Mapping[str, str]], report: RecoveryReport,
                status: str | None) -> dict[str, Any]:
    """Takes a node that would not boot, its evidence (`evidence_of`), recovery's report and
    the node's last status error. Returns the value of its `node-unrecoverable` op: node,
    erlang_node, error (the exception line, or the first line found, or None), where (the
    frame that raised it, or None), evidence, tried (recovery's actions on it: action, outcome,
    seconds), recovery_s, status and gave_up (why recovery gave up on it before its timeout, or
    None)."""
    ev = list(evidence)
    i = next((k for k, e in enumerate(ev) if ERROR.match(e["text"])), None)
    others = [e["text"] for e in ev if "BOOT FAILED" not in e["text"]]
    error = ev[i]["text"] if i is not None else (others[0] if others else None)
    where = None
    if i is not None and i + 1 < len(ev) and "BOOT FAILED" not in ev[i + 1]["text"] \
            and _file(ev[i + 1]) == _file(ev[i]):
        where = ev[i + 1]["text"]
    elif i is None and not any("BOOT FAILED" in e["text"] for e in ev):
        # A crash in a boot that hung (`crash_in_boot`): its reason, then its frame and file line.
        frames = [e["text"] for e in ev[1:3] if e["text"].startswith("[{") and _file(e) == _file(ev[0])]
        where = " ".join(frames) or None
    tried = [{"action": a.get("action"), "outcome": a.get("outcome"),
              "seconds": a.get("seconds")} for a in report.actions if a.get("node") == node.name]
    return {"node": node.name, "erlang_node": node.erlang_name, "error": error, "where": where,
            "evidence": ev, "tried": tried, "recovery_s": round(report.seconds, 3),
            "gave_up": report.gave_up.get(node.name),
            "status": None if status is None else status[:MAX_QUOTE]}


def down_nodes(report: RecoveryReport, nodes: Sequence[Node]) -> list[Node]:
    """Takes recovery's report and the cluster's nodes. Returns the nodes whose last status
    says they were not running (none when recovery ended healthy)."""
    if report.healthy:
        return []
    down = {str(s.get("node")) for s in report.last_status if not s.get("running")}
    return [n for n in nodes if n.erlang_name in down]


def record_unbootable(broker: LogReader, history: Recorder,
                      report: RecoveryReport) -> list[str]:
    """Takes the broker, the history and recovery's report. Records a `node-unrecoverable`
    op (process harness, type info, node the node) for each node that was still not running
    when recovery ended, with its logs' boot failure. Returns those nodes' names; never
    raises for a log it cannot read (the op then has no evidence)."""
    status = {str(s.get("node")): str(s["error"]) if s.get("error") else None
              for s in report.last_status}
    names = []
    for node in down_nodes(report, broker.nodes):
        value = observation(node, evidence_of(node.name, logs_of(broker.read_logs, node)), report,
                            status.get(node.erlang_name))
        log.error("%s would not boot again after the faults: %s (%s); the drain does without it",
                  node.name, value["error"] or "no boot failure in its logs",
                  ", ".join(e["at"] for e in value["evidence"]) or "no evidence")
        history.append(Op(type="info", process=HARNESS, f=UNRECOVERABLE, value=value,
                          node=node.name))
        names.append(node.name)
    return names
