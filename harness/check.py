"""Checking a stored run: the Spark checker over its history, plus what the run itself knows.

`check_run` is what both a fresh run and `python -m harness check RUN_DIR`
call, so a re-check reproduces the same results: the check's options come
from the run's test.json, and only options given on the command line
override them. `check_history_file` checks a history with no run around it
(a history.jsonl, or a Parquet history). Besides the checker's sections
`check_run` adds a `run` section: a run that was interrupted, failed, or
whose cluster never recovered cannot vouch for its history, so that section
is "unknown" (naming the nodes that stayed unhealthy) and the whole verdict
can be no better. The drain is not the run section's business: the queue
section reads the drain's end from the history, and an incomplete drain only
matters there, when something would otherwise be called lost.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import incidents, store
from harness.health import health_section

if TYPE_CHECKING:
    from checkers import CheckOptions
    from checkers.efficacy import Evidence
    from checkers.liveness import LivenessBound

log = logging.getLogger(__name__)


def compose_valid(sections: dict[str, Any]) -> bool | str:
    """Takes results sections (dicts with "valid"; a dict without it, such as `strength`, is
    information, not a judgement). Returns false > unknown > true, as Jepsen merges; a section
    that composes only when false (checkers.results.FALSE_ONLY: liveness) counts only then."""
    from checkers.results import counted

    vals = [s.get("valid") for s in sections.values()
            if isinstance(s, dict) and "valid" in s and counted(s)]
    if any(v is False for v in vals):
        return False
    if any(v is not True for v in vals):
        return "unknown"
    return True


def unhealthy_nodes(last_status: list[dict[str, Any]],
                    unbooted: Collection[str] = ()) -> list[dict[str, str]]:
    """Takes recovery's last status of every node (test.json: recovery.last_status) and the
    Erlang names of the nodes recorded as ones that would not boot again. Returns the other
    nodes that were not whole, each {"node": name, "why": ...}: not running, party to a
    partition (by the union of every node's view), or not seeing every node running but those
    that would not boot."""
    names = {str(s.get("node")) for s in last_status} - set(unbooted)
    peers: dict[str, set[str]] = {}
    for s in last_status:
        for a, others in (s.get("partitions") or {}).items():
            for b in others:
                peers.setdefault(str(a), set()).add(str(b))
                peers.setdefault(str(b), set()).add(str(a))
    out = []
    for s in last_status:
        node = str(s.get("node"))
        if node in unbooted:
            continue
        seen = {str(n) for n in s.get("running_nodes") or []}
        if not s.get("running"):
            why = f"not running: {s['error']}" if s.get("error") else "not running"
        elif peers.get(node):
            why = f"partitioned from {', '.join(sorted(peers[node]))}"
        elif not seen >= names:
            why = f"sees only {', '.join(sorted(seen)) or 'no node'} running"
        else:
            continue
        out.append({"node": node, "why": why})
    return out


def run_section(test_info: dict[str, Any] | None,
                unrecoverable: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Takes test.json's content (or None) and the nodes the history records as ones that would
    not boot again (checkers.unrecoverable.unrecoverable_nodes). Returns the `run` results
    section: "unknown" for an interrupted or failed run, or a cluster that never recovered
    (`unhealthy_nodes` names its nodes), else true. A node that would not boot again is an
    outcome of the faults, not a failure of the run: it is named with its evidence
    (`unrecoverable_nodes`), and the cluster counts as recovered when the others are whole
    among themselves; whether the drain proved the queue empty without it is the queue
    section's business."""
    if not test_info:
        return {"valid": "unknown", "reason": "no test.json"}
    unbooted = {str(u["erlang_node"]) for u in unrecoverable if u.get("erlang_node")}
    problems = []
    if test_info.get("interrupted"):
        problems.append("run was interrupted")
    if test_info.get("error"):
        problems.append(f"run error: {test_info['error']}")
    rec = test_info.get("recovery") or {}
    unhealthy: list[dict[str, str]] = []
    if rec and not rec.get("healthy"):
        unhealthy = unhealthy_nodes(rec.get("last_status") or [], unbooted)
        named = "; ".join(f"{u['node']} {u['why']}" for u in unhealthy)
        if unhealthy or not unbooted:
            problems.append("cluster did not recover after the faults"
                            + (f" ({named}): what the history says of messages on those "
                               f"nodes cannot be trusted" if named else ""))
    return {
        "valid": "unknown" if problems else True,
        "problems": problems,
        "recovery_actions": len(rec.get("actions", [])) if rec else 0,
        "unhealthy_nodes": unhealthy,
        "unrecoverable_nodes": list(unrecoverable),
    }


def _unrecoverable(run_dir: Path, results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Takes a run directory and the check's results. Returns the nodes its history records as
    ones that would not boot again (checkers.unrecoverable), from the harness ops the check
    gathered, else from the history read once; none when it cannot be read (then such a node
    counts as a cluster that did not recover)."""
    from checkers.traces import traces_from_file, traces_of
    from checkers.unrecoverable import unrecoverable_nodes

    traces = traces_of(results)
    try:
        if traces is None:
            traces = traces_from_file(run_dir / store.HISTORY, ())
    except (OSError, ValueError) as e:
        log.warning("could not read the harness's records of nodes that did not boot: %s", e)
        return []
    return unrecoverable_nodes(traces.harness)


def check_options(test_info: dict[str, Any] | None,
                  overrides: Mapping[str, Any] | None = None) -> CheckOptions:
    """Takes test.json's content (or None) and options given on the command line (CheckOptions
    fields; None means not given). Returns the check's options: the stored spec's (its check
    section, read with defaults for settings it predates), overridden."""
    from checkers import CheckOptions

    stored = ((test_info or {}).get("spec") or {}).get("check")
    opts = CheckOptions.from_recorded(stored if isinstance(stored, dict) else None)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    return dataclasses.replace(opts, **given) if given else opts


def check_run(run_dir: Path, spark_master: str | None = None, *,
              overrides: Mapping[str, Any] | None = None, history: Path | None = None,
              out: Path | None = None) -> dict[str, Any]:
    """Takes a run directory, and optionally a Spark master (else the spec's), options that
    override the spec's (`check_options`), the history to read (default its history.jsonl;
    e.g. a Parquet copy of it) and where to write the results (default its results.json).
    Checks the history, writes the results. Returns them."""
    from checkers import check_history

    test_path = run_dir / store.TEST
    test_info = store.read_json(test_path) if test_path.exists() else None
    opts = check_options(test_info, {**(overrides or {}), "spark_master": spark_master})
    results = check_history(history or run_dir / store.HISTORY, options=opts,
                            evidence=run_evidence(run_dir, test_info),
                            liveness=liveness_bound(test_info))
    results["run"] = run_section(test_info, _unrecoverable(run_dir, results))
    results["versions"] = dict((test_info or {}).get("versions") or {})  # what was tested
    _explain_anomalies(run_dir, results, test_info)
    _weigh_mends(run_dir, results)
    _say_unbooted(results)
    incidents.add_incidents(run_dir, results, test_info)
    health = health_section(run_dir, test_info)  # the harness's own: never judged
    if health is not None:
        results["health"] = health
    sections = {k: v for k, v in results.items() if k != "valid"}
    results = {"valid": compose_valid(sections), **sections}
    store.write_json(out or run_dir / store.RESULTS, results)
    return results


def liveness_bound(test_info: dict[str, Any] | None) -> LivenessBound | None:
    """Takes test.json's content (or None). Returns what the liveness bound is derived from: the
    broker's net_ticktime, the grace recovery gives an unhealthy node (harness.recovery.grace_s)
    and the recovery timeout, each the spec's or, for a spec stored before it had one, the
    default; None without a spec."""
    from harness.recovery import liveness_bound as bound_of
    from harness.spec import TestSpec

    spec = (test_info or {}).get("spec")
    if not isinstance(spec, dict):
        return None
    default = TestSpec()
    broker = spec.get("broker")
    tick = broker.get("net_ticktime") if isinstance(broker, dict) else None
    timeout = spec.get("recovery_timeout_s")
    tick_s = float(tick) if isinstance(tick, int | float) else float(default.broker.net_ticktime)
    timeout_s = (float(timeout) if isinstance(timeout, int | float)
                 else float(default.recovery_timeout_s))
    return bound_of(tick_s, timeout_s, source="test.json")


def run_evidence(run_dir: Path, test_info: dict[str, Any] | None) -> Evidence | None:
    """Takes a run directory and its test.json's content. Returns the broker's evidence of the
    faults (checkers.efficacy): its node logs' events lined up with the history, net_ticktime,
    the queue's leader at the start; None when the run has no node logs or no clock to line
    them up with (then whether a fault was noticed is "unknown")."""
    from checkers.broker_log import read_events
    from checkers.efficacy import Evidence
    from clusters.releases import known_line

    info = test_info or {}
    nodes_dir = run_dir / store.NODES
    start = info.get("history_start_unix")
    if start is None and info.get("start_time"):
        start = datetime.fromisoformat(info["start_time"]).timestamp()  # older runs: to 1 s
    if start is None or not nodes_dir.is_dir():
        return None
    version = (info.get("versions") or {}).get("rabbitmq")
    line = known_line(str(version)) if version else None
    try:
        events, coverage = read_events(nodes_dir, float(start), info.get("nodes") or {}, line)
    except OSError as e:
        log.warning("could not read the node logs: %s", e)
        return None
    # Raft lines of other queues (the harness's own dead-letter queue) are not the tested
    # queue's elections: a failover is the queue under test changing leader.
    queue = ((info.get("spec") or {}).get("queue") or {}).get("name")
    if queue:
        events = [e for e in events if e.queue is None or e.queue == queue]
    broker = (info.get("spec") or {}).get("broker") or {}
    tick = broker.get("net_ticktime")
    placement = info.get("placement_at_start") or {}
    return Evidence(events, coverage, float(tick) if tick is not None else None,
                    placement.get("leader") if isinstance(placement, dict) else None)


def check_history_file(history: Path, spark_master: str | None = None, *,
                       overrides: Mapping[str, Any] | None = None,
                       out: Path | None = None) -> dict[str, Any]:
    """Takes a history with no run around it (a JSONL file or a Parquet history), a Spark master,
    options (`check_options` without a spec) and where to write the results (None: nowhere).
    Returns the checker's results."""
    from checkers import check_history

    opts = check_options(None, {**(overrides or {}), "spark_master": spark_master})
    results = check_history(history, options=opts)
    if out is not None:
        store.write_json(out, results)
    return results


# The anomaly classes whose sampled messages get their story told, and how many of each.
EXPLAINED = ("lost", "lost_unacked", "unexpected", "unflagged_duplicated", "unflagged_after_ack",
             "recovered", "delivered_failed")
EXPLAIN_LIMIT = 10


def _explain_anomalies(run_dir: Path, results: dict[str, Any],
                       test_info: dict[str, Any] | None) -> None:
    """Adds queue.details: for up to EXPLAIN_LIMIT sampled ids of each anomaly class, what
    happened to the message and around it (harness.explain), in readable columns. The stories
    come from the traces the Spark check gathered (checkers.traces); only results that carry
    none (or not of every id told) send it back to the history, in one plain pass."""
    from checkers.traces import traces_from_file, traces_of
    from harness.explain import log_lines, readable, tell

    queue = results.get("queue")
    if not isinstance(queue, dict):
        return
    samples = {c: (queue.get(c) or [])[:EXPLAIN_LIMIT] for c in EXPLAINED
               if queue.get(f"{c}_count")}
    if not samples:
        return
    info = test_info or {}
    start = info.get("history_start_unix")
    if start is None and info.get("start_time"):
        start = datetime.fromisoformat(info["start_time"]).timestamp()  # older runs: to 1 s
    ids = {i for v in samples.values() for i in v}
    acks = queue.get("acks_recorded")
    try:
        traces = traces_of(results)
        if traces is None or not ids <= set(traces.ops):
            log.info("no traces of the sampled messages from the check: reading the history")
            traces = traces_from_file(run_dir / store.HISTORY, ids)
        stories = tell(traces, samples, log_lines(run_dir / store.NODES, start),
                       limit=EXPLAIN_LIMIT, acks_recorded=acks if isinstance(acks, bool) else None)
    except (OSError, ValueError) as e:  # a story is a courtesy: never lose the verdict over it
        log.warning("could not explain the anomalies: %s", e)
        return
    queue["details"] = {c: [readable(s) for s in v] for c, v in stories.items()}


def _weigh_mends(run_dir: Path, results: dict[str, Any]) -> None:
    """Adds the "mends" section (harness.mends): the harness's own restarts and how much of the
    loss may be theirs, from the check's traces (or, for results that carry none, the history
    read once); when something was lost and the harness restarted nodes, the sentence joins
    the lost messages' explanation."""
    from checkers.traces import traces_of
    from harness.mends import mend_section, weigh

    found = results.get("queue")
    queue: dict[str, Any] = found if isinstance(found, dict) else {}
    lost = int(queue.get("lost_count") or 0)
    traces = traces_of(results)
    try:
        section = (weigh(traces, lost) if traces is not None
                   else mend_section(run_dir / store.HISTORY, lost))
    except (OSError, ValueError) as e:
        log.warning("could not weigh the harness's restarts: %s", e)
        return
    results["mends"] = section
    explanations = queue.get("explanations")
    if lost and section["mends"] and isinstance(explanations, dict) and "lost" in explanations:
        explanations["lost"] = f"{explanations['lost']} {section['statement']}"


def _say_unbooted(results: dict[str, Any]) -> None:
    """When something was lost and a node did not boot again, the lost messages' explanation
    says so: the drain that proved them absent did without that node (a drain that could not
    do without it is incomplete, and then nothing is called lost)."""
    queue = results.get("queue")
    run = results.get("run")
    if not isinstance(queue, dict) or not isinstance(run, dict):
        return
    names = [str(u.get("node")) for u in run.get("unrecoverable_nodes") or []
             if isinstance(u, dict)]
    explanations = queue.get("explanations")
    if names and queue.get("lost_count") and isinstance(explanations, dict) \
            and "lost" in explanations:
        explanations["lost"] = (
            f"{explanations['lost']} {', '.join(names)} did not boot again after the faults "
            f"(results.json run.unrecoverable_nodes), and the drain proved the queue empty "
            f"without {'it' if len(names) == 1 else 'them'}, as the queue's kind allows (a "
            f"quorum queue's leader on a serving majority of its members, a classic queue's "
            f"home node serving): no message of the queue can be waiting there alone, so these "
            f"are lost.")


def exit_code(results: dict[str, Any] | None) -> int:
    """Returns 0 for valid, 1 for invalid, 2 for unknown or no results."""
    if results is None:
        return 2
    v = results.get("valid")
    return 0 if v is True else 1 if v is False else 2
