"""Nodes that would not boot again after the faults, as the history records them.

The harness records such a node as an outcome of the run, not an error of its
own (harness.unbootable): an `info` op of process "harness", f
"node-unrecoverable", node the node, value {node, erlang_node, error, where,
evidence: [{at: "<node>/<file>:<line>", text}], tried: [{action, outcome,
seconds}], recovery_s, status}. The drain then did without the node, and its
end says whether the serving nodes proved the queue empty. This module reads
those ops: `unrecoverable_nodes` for results.json's run section, and
`did_not_boot` for the effects of the fault that hit the node (checkers.efficacy).
Pure: no Spark, no files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from history import UNRECOVERABLE

NS = 1_000_000_000
MS = 1_000_000


class HarnessOp(Protocol):
    """A harness op as the checks hold it (history.Op, checkers.phases.HarnessEvent)."""

    @property
    def time(self) -> int:
        """Nanoseconds since the test started."""
        ...

    @property
    def f(self) -> str:
        """The op's function."""
        ...

    @property
    def value(self) -> Any:
        """Its decoded value."""
        ...

    @property
    def node(self) -> str | None:
        """The node it names."""
        ...


def unrecoverable_nodes(harness: Iterable[HarnessOp]) -> list[dict[str, Any]]:
    """Takes the harness ops in history order. Returns each node recorded as one that would not
    boot again (the last record of a node counts), in history order: {node, erlang_node,
    at_s, error, where, evidence, tried (the actions, in order), gave_up (why recovery gave up
    on it before its timeout, or None), text (one sentence)}."""
    found: dict[str, dict[str, Any]] = {}
    for op in harness:
        if op.f != UNRECOVERABLE or not isinstance(op.value, dict):
            continue
        v = op.value
        node = str(v.get("node") or op.node)
        evidence = [e for e in v.get("evidence") or () if isinstance(e, dict)]
        tried = [str(t.get("action")) for t in v.get("tried") or () if isinstance(t, dict)]
        found.pop(node, None)
        found[node] = {"node": node, "erlang_node": v.get("erlang_node"),
                       "at_s": round(op.time / NS, 3), "error": v.get("error"),
                       "where": v.get("where"), "evidence": evidence, "tried": tried,
                       "gave_up": v.get("gave_up"),
                       "text": sentence(node, v.get("error"), _at(evidence, v.get("error")),
                                        tried, v.get("gave_up"))}
    return list(found.values())


def _at(evidence: Sequence[dict[str, Any]], error: Any) -> str | None:
    """Returns where the error line was logged, else where the first line was, else None."""
    at = next((e.get("at") for e in evidence if e.get("text") == error), None)
    return str(at) if at else (str(evidence[0].get("at")) if evidence else None)


def sentence(node: str, error: Any, at: str | None, tried: Sequence[str],
             gave_up: Any = None) -> str:
    """Takes a node, its boot error line (None: none found), where it was logged, what the
    harness tried and why it gave up before its timeout (None: it tried to the timeout).
    Returns the run section's sentence about it."""
    said = (f"{node} did not boot: {error}" + (f" ({at})" if at else "") if error
            else f"{node} did not boot, and its logs name no boot failure")
    counts: dict[str, int] = {}
    for action in tried:
        counts[action] = counts.get(action, 0) + 1
    did = ", ".join(a if n == 1 else f"{a} x{n}" for a, n in counts.items())
    why = f" ({gave_up})" if gave_up else ""
    return (f"{said}; the harness tried {did or 'nothing'} and gave up{why}, and the drain did "
            f"without it.")


def did_not_boot(node: dict[str, Any]) -> dict[str, Any]:
    """Takes one of `unrecoverable_nodes`. Returns its effect for the fault that hit the node
    (checkers.efficacy's effect shape): kind "node-did-not-boot", at the time it was recorded,
    its log evidence and "<node> did not boot: <line>"."""
    error = node.get("error")
    at = _at(node.get("evidence") or [], error)
    text = (f"{node['node']} did not boot: {error}" if error
            else f"{node['node']} did not boot (no boot failure in its logs)")
    return {"kind": "node-did-not-boot", "node": node["node"],
            "at_ms": round(node["at_s"] * 1000, 3), "evidence": at or "history", "text": text}
