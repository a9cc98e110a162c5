"""Nodes that would not boot again after the faults: an outcome of the run, with the broker's words.

A power loss can leave a node's data directory in a state its broker refuses
to boot from (RabbitMQ 3.10 on an empty list of enabled feature flags:
`{case_clause,{ok,[]}}`). Recovery (harness.recovery) tries to mend it, as it
mends any node, and gives up at its timeout. Such a node is not a harness
error: it is what the fault did. `record_unbootable` finds each node still not
running when recovery ends, reads its log directory for the boot failure
(`boot_failure`: the "BOOT FAILED" banner, the error and the frame that raised
it, each with its file and line as the run's nodes/<node>/ copy will hold them),
and records it as a harness observation, `f "node-unrecoverable"` (value:
node, erlang_node, error, where, evidence, tried, status), which the checker
reads into the run section and the fault's effects. The drain then does
without the node (workloads.queue_workload): whether the queue can be proven
empty without it is the queue kind's to say.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from clusters.base import Node
from clusters.remote import RemoteError
from harness.recovery import RecoveryReport
from history import HARNESS, UNRECOVERABLE, Op, Recorder

log = logging.getLogger(__name__)

# A log line's own prefix (time, level, Erlang pid), left out of the text quoted.
_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d[ T][0-9:.+\-]+ \[\w+\] <[0-9.]+> ?")
# The line of a boot failure's exception, and other last words of a broker that did not boot.
_ERROR = re.compile(r"^(error|exit|throw):")
_LAST_WORDS = ("application_start_failure", "Kernel pid terminated",
               "init terminating in do_boot")
# A boot that hangs rather than fails: a process crashed after the last boot began and the broker
# never said its startup was complete (3.10.8 after a power cut: the message store's rebuild,
# `{badmatch,#{}}` in rabbit_queue_index:scan_queue_segments, on every boot).
_BOOT_BEGAN = " Starting RabbitMQ "
_BOOT_DONE = "Server startup complete"
_CRASH = "** Reason for termination =="
# The log files read first: the broker's own output, where 3.10 writes the banner of a boot that
# failed before its log handlers were switched on.
FIRST = ("startup.out",)
MAX_QUOTE = 300


class LogReader(Protocol):
    """What reads a node's logs (clusters.rabbitmq.RabbitBroker)."""

    @property
    def nodes(self) -> Sequence[Node]:
        """The cluster's nodes."""
        ...

    def read_logs(self, node: Node) -> dict[str, str]:
        """Takes a node. Returns its log files' texts by name."""
        ...


def _clean(line: str) -> str:
    return _PREFIX.sub("", line).strip()[:MAX_QUOTE]


def boot_failure(text: str) -> list[tuple[int, str]]:
    """Takes a log file's text. Returns the lines (1-based number, text without the log's
    prefix) that say why the broker's last boot failed: the last "BOOT FAILED" banner, the
    exception under it (error:..., exit:...) and the first frame after that; else the last
    line naming an application start failure or a terminated kernel; else a process's crash in
    a last boot that never completed (`crash_in_boot`); else nothing."""
    lines = text.splitlines()
    banner = next((i for i in range(len(lines) - 1, -1, -1) if "BOOT FAILED" in lines[i]), None)
    if banner is None:
        last = next((i for i in range(len(lines) - 1, -1, -1)
                     if any(w in lines[i] for w in _LAST_WORDS)), None)
        return crash_in_boot(lines) if last is None else [(last + 1, _clean(lines[last]))]
    found = [(banner + 1, _clean(lines[banner]))]
    for k in range(banner + 1, min(len(lines), banner + 12)):
        if _ERROR.match(_clean(lines[k])):
            found.append((k + 1, _clean(lines[k])))
            frame = next((m for m in range(k + 1, min(len(lines), k + 4))
                          if _clean(lines[m])), None)
            if frame is not None:
                found.append((frame + 1, _clean(lines[frame])))
            break
    return found


def crash_in_boot(lines: Sequence[str]) -> list[tuple[int, str]]:
    """Takes a log file's lines. Returns, when the last boot began and never completed and a
    process crashed in it, the first crash's reason and the frame that raised it with its file
    line (1-based number, text without the log's prefix or the crash report's "** "); else
    nothing."""
    began = next((i for i in range(len(lines) - 1, -1, -1) if _BOOT_BEGAN in lines[i]), None)
    if began is None or any(_BOOT_DONE in line for line in lines[began:]):
        return []
    crash = next((i for i in range(began, len(lines)) if _CRASH in lines[i]), None)
    if crash is None or crash + 1 >= len(lines):
        return []
    found = [(crash + 1 + 1, _clean(lines[crash + 1]).removeprefix("** "))]
    found += [(k + 1, _clean(lines[k])) for k in range(crash + 2, min(len(lines), crash + 4))
              if _clean(lines[k]).startswith("[{")]
    return found


def evidence_of(node: str, logs: Mapping[str, str]) -> list[dict[str, str]]:
    """Takes a node's name and its log files' texts by name. Returns each boot-failure line
    found (`boot_failure`), as {"at": "<node>/<file>:<line>", "text": ...}: the broker's own
    output first, then the other files by name."""
    order = [f for f in FIRST if f in logs] + sorted(f for f in logs if f not in FIRST)
    return [{"at": f"{node}/{name}:{n}", "text": text}
            for name in order for n, text in boot_failure(logs[name])]


def _file(e: Mapping[str, str]) -> str:
    return e["at"].rsplit(":", 1)[0]


def observation(node: Node, evidence: Sequence[Mapping[str, str]], report: RecoveryReport,
                status: str | None) -> dict[str, Any]:
    """Takes a node that would not boot, its evidence (`evidence_of`), recovery's report and
    the node's last status error. Returns the value of its `node-unrecoverable` op: node,
    erlang_node, error (the exception line, or the first line found, or None), where (the
    frame that raised it, or None), evidence, tried (recovery's actions on it: action, outcome,
    seconds), recovery_s and status."""
    ev = list(evidence)
    i = next((k for k, e in enumerate(ev) if _ERROR.match(e["text"])), None)
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
        try:
            logs = broker.read_logs(node)
        except (RemoteError, OSError) as e:
            log.warning("could not read %s's logs: %s", node.name, e)
            logs = {}
        value = observation(node, evidence_of(node.name, logs), report,
                            status.get(node.erlang_name))
        log.error("%s would not boot again after the faults: %s (%s); the drain does without it",
                  node.name, value["error"] or "no boot failure in its logs",
                  ", ".join(e["at"] for e in value["evidence"]) or "no evidence")
        history.append(Op(type="info", process=HARNESS, f=UNRECOVERABLE, value=value,
                          node=node.name))
        names.append(node.name)
    return names
