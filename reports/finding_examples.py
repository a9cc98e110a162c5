"""A finding's example messages: what results.json says of each, and its timeline from the history.

`examples` gathers them from results.json: each anomalous message the queue
section details (`details[<kind>]`, else its id list), once however many
kinds it belongs to, and each ordering violation the ordering section gives as
an example (the two deliveries, and the messages of that publisher between
them), and each example of the priority, delayed-retry and consumer-timeout
sections (the messages it names). `example_lines` writes one as Markdown: what results.json says of it
(publish, deliveries, faults and leader then; never the per-message broker-log
excerpt, which the incident shows once), whether a delivery of it lies within
a second of a phase boundary (then "suspect: at a phase boundary"), and the
table of its ops straight from the history with exact times, the harness's
and the nemesis's ops near them, and each delivery's distance to the nearest
phase boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from history import HARNESS, Op
from reports import markdown as md
from reports.finding_history import (
    DELIVERIES,
    ENDS,
    PHASE,
    PLACEMENT,
    Scan,
    boundary_label,
    distance_text,
    fault_words,
    suspects,
    timeline,
)
from reports.page import as_dict

MAX_PER_KIND = 5
MAX_SPAN = 10  # an ordering example's messages shown: those between its two, when this few
MAX_ROWS = 80
DETAIL_LOG = "broker log"  # the details' per-message excerpt: the incident shows it once
SUSPECT = "suspect: at a phase boundary (the harness's own stop may be involved)"
COLUMNS = ("index", "t (s)", "UTC", "op", "process", "consumer", "node", "redelivered",
           "phase", "to nearest phase boundary")


@dataclass(frozen=True)
class Example:
    """One example: its heading, the kinds it shows, the messages its table follows, what
    results.json says of it ((label, text) pairs) and the ids its incident may name."""

    heading: str
    kinds: tuple[str, ...]
    ids: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]
    incident_ids: tuple[str, ...]


def examples(results: Any, kinds: Sequence[str]) -> tuple[list[Example], list[str]]:
    """Takes results.json's content and the finding's kinds. Returns its examples (each message
    once, the first kind's details telling it) and notes on what was left out."""
    shown: dict[str, Example] = {}
    notes: list[str] = []
    queue = as_dict(as_dict(results).get("queue"))
    for kind in kinds:
        if kind == "ordering":
            continue
        details = as_dict(queue.get("details")).get(kind)
        entries = [d for d in details if isinstance(d, dict) and d.get("id")] \
            if isinstance(details, list) else [{"id": i} for i in queue.get(kind) or []]
        for d in entries[:MAX_PER_KIND]:
            mid = str(d["id"])
            if mid in shown:
                shown[mid] = replace(shown[mid], kinds=(*shown[mid].kinds, kind))
            else:
                facts = tuple((str(k), str(v)) for k, v in d.items()
                              if k not in ("id", DETAIL_LOG) and v not in (None, "", []))
                shown[mid] = Example(f"Message {md.code(mid)}", (kind,), (mid,), facts, (mid,))
        if len(entries) > MAX_PER_KIND:
            notes.append(f"{kind}: {len(entries) - MAX_PER_KIND} more example(s) in results.json")
    out = list(shown.values())
    for kind in (k for k in kinds if k in PROMISE_EXAMPLES):
        found = [x for x in as_dict(as_dict(results).get(kind)).get("examples") or []
                 if isinstance(x, dict)]
        out += [PROMISE_EXAMPLES[kind](x) for x in found[:MAX_PER_KIND]]
        if len(found) > MAX_PER_KIND:
            notes.append(f"{kind}: {len(found) - MAX_PER_KIND} more example(s) in results.json")
    if "ordering" in kinds:
        ordering = as_dict(as_dict(results).get("ordering"))
        found = [x for x in ordering.get("examples") or [] if isinstance(x, dict)]
        out += [_ordering_example(x, results) for x in found[:MAX_PER_KIND]]
        if len(found) > MAX_PER_KIND:
            notes.append(f"ordering: {len(found) - MAX_PER_KIND} more example(s) in results.json")
    return out, notes


def _facts(x: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Takes a promise section's example. Returns its fields as (label, text), its timeline
    left to the history's table."""
    return tuple((str(k), str(v)) for k, v in x.items()
                 if k not in ("timeline", "id") and v not in (None, "", [], {}))


def _priority_example(x: dict[str, Any]) -> Example:
    """Takes a priority example. Returns it following the delivery and the message that
    overtook it."""
    d, by = as_dict(x.get("delivery")), as_dict(x.get("overtaken_by"))
    ids = tuple(str(i) for i in (d.get("id"), by.get("id")) if i)
    heading = (f"Consumer {md.code(x.get('consumer'))}: {md.code(d.get('id'))} (level "
               f"{d.get('level')}) handed out while {md.code(by.get('id'))} (level "
               f"{by.get('level')}) was ready")
    return Example(heading, ("priority",), ids, _facts(x), ids)


def _message_example(kind: str) -> Any:
    """Takes a promise section's name. Returns how one of its examples (a message id and its
    violation) becomes an Example following that message."""
    def one(x: dict[str, Any]) -> Example:
        mid = str(x.get("id"))
        return Example(f"Message {md.code(mid)}: {md.text(str(x.get('violation')))}", (kind,),
                       (mid,), _facts(x), (mid,))
    return one


# The promise sections whose examples a finding follows, and how each becomes an Example.
PROMISE_EXAMPLES = {"priority": _priority_example,
                    "delayed_retry": _message_example("delayed_retry"),
                    "consumer_timeout": _message_example("consumer_timeout")}


def _delivery_fact(d: dict[str, Any]) -> str:
    t = d.get("time_ms")
    at = f"{float(t) / 1000:.6f} s" if isinstance(t, int | float) else "an unknown time"
    flag = "flagged redelivered" if d.get("redelivered") else "unflagged"
    return f"{d.get('id')} (seq {d.get('seq')}, history index {d.get('index')}) at {at}, {flag}"


def _ordering_example(x: dict[str, Any], results: Any) -> Example:
    """Takes one ordering example (consumer, publisher, earlier, later) and the results.
    Returns it as an Example following the publisher's messages from the later one's seq to the
    earlier one's (or just those two when they are far apart)."""
    earlier, later = as_dict(x.get("earlier")), as_dict(x.get("later"))
    pub = x.get("publisher")
    seqs = [s for s in (earlier.get("seq"), later.get("seq")) if isinstance(s, int)]
    ids: tuple[str, ...]
    if len(seqs) == 2 and abs(seqs[0] - seqs[1]) < MAX_SPAN:
        ids = tuple(f"{pub}-{s}" for s in range(min(seqs), max(seqs) + 1))
    else:
        ids = tuple(str(d["id"]) for d in (later, earlier) if d.get("id"))
    t = later.get("time_ms")
    facts = (("consumer", str(x.get("consumer"))), ("publisher", str(pub)),
             ("delivered first", _delivery_fact(earlier)),
             ("delivered after it", _delivery_fact(later)),
             ("faults then", faults_at(results, t) if isinstance(t, int | float) else "unknown"))
    heading = (f"Publisher {pub} to consumer {md.code(x.get('consumer'))}: "
               f"{md.code(earlier.get('id'))} delivered before {md.code(later.get('id'))}")
    pair = tuple(str(d["id"]) for d in (earlier, later) if d.get("id"))
    return Example(heading, ("ordering",), ids, facts, pair)


def faults_at(results: Any, t_ms: float) -> str:
    """Takes results.json's content and a time (ms). Returns the faults in effect then
    ("partition-one on n1"), or "none"."""
    found = []
    for f in as_dict(results).get("faults") or []:
        f = as_dict(f)
        start, end = f.get("start_ms"), f.get("end_ms")
        if isinstance(start, int | float) and start <= t_ms and (
                not isinstance(end, int | float) or t_ms <= end):
            found.append(fault_words(f))
    return "; ".join(found) or "none"


def example_suspects(ex: Example, s: Scan | None) -> list[str]:
    """Takes an example and the scan (None: no history). Returns, in Markdown, each delivery of
    its anomalous messages (the message itself; an ordering example's two) that lies within a
    second of a phase boundary."""
    if s is None:
        return []
    return [f"{md.code(i)} {md.text(_op_name(op))} at {op.time / 1e9:.6f} s, "
            f"{md.text(distance_text(op.time, s.phases))}"
            for i in ex.incident_ids for op, _d, _b in suspects(s.by_id.get(i, []), s.phases)]


def example_lines(ex: Example, s: Scan | None, start_unix: float | None,
                  incidents: Sequence[str]) -> list[str]:
    """Takes an example, the history's scan (None: no history), the wall clock at history time
    0 (None: unknown) and the incidents holding it ("Incident 1"). Returns its Markdown."""
    lines = [f"### {ex.heading}", "",
             f"Kind: {', '.join(md.code(k) for k in ex.kinds)}.", ""]
    found = example_suspects(ex, s)
    if found:
        lines.append(f"- **{SUSPECT}**: " + "; ".join(found))
    lines += [f"- {md.text(k)}: {md.text(v)}" for k, v in ex.facts]
    lines.append("- broker log: " + (md.text("; ".join(incidents)) + " (its log lines below)"
                                     if incidents else "no incident of results.json holds it"))
    lines.append("")
    return lines + ops_part(s, lambda scan: timeline(scan, ex.ids), start_unix, "message")


def ops_part(s: Scan | None, ops_of: Callable[[Scan], list[Op]], start_unix: float | None,
             what: str, intro: str | None = None) -> list[str]:
    """Takes the history's scan (None: no history), what picks a part's ops from it, the wall
    clock at history time 0, what the part is of ("message") and a sentence before the table
    (None: none). Returns the part's ops as a Markdown table (at most MAX_ROWS, the rest
    counted), or why there is none."""
    if s is None:
        return [f"The run stored no history: results.json's words above are all there is of "
                f"this {what}.", ""]
    ops = ops_of(s)
    if not ops:
        return [f"The history holds no op of this {what}.", ""]
    lines = [intro, ""] if intro else []
    lines += md.table(COLUMNS, [op_cells(op, s, start_unix) for op in ops[:MAX_ROWS]])
    if len(ops) > MAX_ROWS:
        lines.append(f"\n{len(ops) - MAX_ROWS} more op(s) in the history.")
    return [*lines, ""]


def _op_name(op: Op) -> str:
    """Takes an op. Returns what it was in a few words."""
    if op.f == "publish":
        return {"invoke": "publish sent", "ok": "publish confirmed (basic.ack)",
                "fail": "publish refused", "info": "publish outcome unknown"}.get(op.type, op.type)
    if op.f in DELIVERIES:
        return f"delivered ({op.f})"
    if op.f == PHASE:
        return f"harness: {boundary_label(op)}"
    if op.f == PLACEMENT and op.process == HARNESS:
        leader = as_dict(op.value).get("leader")
        return f"harness: queue leader {leader}" if leader else "harness: placement sample"
    if op.f in ENDS:
        held = op.extra.get("holding")
        holding = f", holding {', '.join(map(str, held))}" if held else ""
        return f"{op.f} {op.type}, by {op.extra.get('by') or 'harness'}{holding}"
    if op.process == "nemesis":
        v = as_dict(op.value)
        nodes = v.get("nodes")
        on = f" on {', '.join(map(str, nodes))}" if isinstance(nodes, list) else ""
        return f"nemesis: {op.f} {v.get('fault') or ''}".rstrip() + on
    return f"{op.f} {op.type}"


def op_cells(op: Op, s: Scan, start_unix: float | None) -> list[str]:
    """Takes an op, the scan and the wall clock at history time 0. Returns its table cells."""
    name = _op_name(op) + (f": {op.error}" if op.error else "")
    if op.f in DELIVERIES and op.delivery_count is not None:
        flag = f"x-delivery-count {op.delivery_count}"
    else:
        flag = ""
    redelivered = "" if op.redelivered is None else ("flagged" if op.redelivered else "unflagged")
    distance = distance_text(op.time, s.phases) if op.f in DELIVERIES else ""
    return [str(op.index), f"{op.time / 1e9:.6f}", _utc(op.time, start_unix), md.text(name),
            md.text(op.process), md.text(op.consumer or ""), md.text(op.node or ""),
            md.text(", ".join(x for x in (redelivered, flag) if x)), md.text(op.phase or ""),
            md.text(distance)]


def _utc(t: int, start_unix: float | None) -> str:
    """Takes a history time (ns) and the wall clock at time 0. Returns the UTC time of day with
    milliseconds (the nodes' logs' clock), or ""."""
    if start_unix is None:
        return ""
    return datetime.fromtimestamp(start_unix + t / 1e9, UTC).strftime("%H:%M:%S.%f")[:-3]
