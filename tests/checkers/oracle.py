"""An independent oracle of the checker, for tests only: results.json's counts and id sets, worked
out again from the definitions, in the plainest Python.

It is written from shared/DESIGN.md (the history format, results.json's
definitions), the checker's documented rules (ordering, drain, acks, fault
windows, perf) and issue 10's texts, and imports nothing of the project: not
checkers/ (whose judgement it checks), not history/ (which the checkers use
to read fault windows). It parses the JSONL itself. It assumes a history that
keeps the contract (the checker's own tests cover bad input) and holds it in
memory, so it is for the small generated and literal histories of the tests.

The definitions, as this file applies them:

- Ops. A *client* op has an integer process (a decimal string counts, as the
  checker reads `process` as text). A *publish* is a client op with f
  "publish": an invoke, then at most one completion (ok, fail or info). A
  *delivery* is a client op of type ok with f "consume" or "drain". An *ack*
  is a client op of type ok with f "ack". A *dead letter* is a client op of
  type ok with f "dead-letter" (a message the queue dropped by design, read
  back from the harness's dead-letter queue), its `reason` the x-death one.
  Nemesis ops have process "nemesis", harness events process "harness".
- Acks. Within a stream (process, consumer tag, message id) acks pair with
  deliveries first in, first out: the k-th delivery is acked by the k-th ack.
  A history with no ack op at all is read as if every delivery was acked, at
  its own index.
- Queue. attempted = ids with a publish invoke; acknowledged = ok publishes;
  received = ids delivered; delivered = ids with an acked delivery; ok =
  attempted and delivered; dead_lettered = ids with a dead letter;
  dropped_by_design = attempted, dead-lettered and not delivered, counted by
  the reason of the id's first dead letter ("(none)" without one), most
  frequent first, then by reason, with each reason's first ids;
  dead_lettered_delivered = dead-lettered and delivered; lost = acknowledged,
  not delivered and not dead-lettered;
  lost_unacked = lost and received; unexpected = received and not attempted;
  duplicated = attempted ids with more than one acked delivery, *unflagged*
  when an acked delivery after the first acked one (by delivery index) lacks
  the redelivered flag, else *redelivered*; unflagged_after_ack = ids with an
  unflagged delivery (acked or not) after the ack of a flagged delivery;
  unflagged_redelivered = ids with a delivery after their first (by index,
  acked or not) without the redelivered flag, recorded more than 1 s after
  the id's first delivery;
  recovered = attempted and delivered ids whose publish ended info or never
  completed; delivered_failed = delivered ids whose publish failed; info_count
  counts publishes that ended info or never completed; fail_reasons counts
  failed publishes by error text ("(none)" without one), most frequent first,
  then by text.
- Drain. The drain's end is the last harness phase event of the drain whose
  state is not "start"; the drain completed iff that event has state "end"
  and its `complete` is absent or true.
- Queue verdict. Invalid for unexpected ids, for unflagged duplicates and
  unflagged_after_ack (unless unflagged duplicates are allowed), for
  unflagged_redelivered when unflagged redeliveries are made invalid, for flagged
  duplicates when they are made invalid, and for lost ids once the drain
  completed (or when the drain is not required). Lost ids with an unproven
  drain and nothing else wrong: "unknown"; so too when the last harness
  "dead-lettering" observation says by "user" with limits (the queue drops
  into an exchange the harness does not read). Nothing else: valid. `anomalies`
  lists lost and lost_unacked (when any), then the invalidating classes in
  the order unexpected, unflagged_duplicated, unflagged_after_ack,
  unflagged_redelivered, redelivered_duplicated.
- Ordering (RabbitMQ: enqueue order per channel, delivery in enqueue order,
  redeliveries flagged). A delivery's publisher and seq are its fields, else
  parsed from its id "<publisher>-<seq>"; a delivery with neither is not
  checked. Streams: per (process, consumer tag, publisher), or per publisher
  alone in strict mode; when some publish op carries a non-null priority,
  each stream is split by its deliveries' priority field (null a value of its
  own: a later message of a higher priority may go first), and the section's
  by_priority is true. In history order each delivery d of a stream is
  compared with an earlier one p: default mode, d unflagged: p is the last
  unflagged delivery of the stream and d.seq <= p.seq is out of order; d
  flagged: p is the last delivery, d.seq < p.seq is a *flagged* reorder
  (counted, never invalid); strict mode: p is the last delivery, and d.seq <
  p.seq, or d.seq == p.seq with d unflagged, is out of order (flagged or not).
  An out-of-order pair whose d message was published by another process than
  p's and not confirmed is an *unconfirmed reorder* and counts nowhere else.
  Before that: a consumer (process, tag) is *cancelled* at its first op f
  "cancel" of type invoke or ok, and its channel *ends* at its first op f
  "close" of another type than invoke (none: never); a cancelled consumer whose
  channel ended before its cancel holds nothing, else it *holds* each message
  it was delivered before its cancel and never acked (no ack op at all: every
  delivery acked, nothing held). An out-of-order pair whose d is flagged, d's
  message held by a cancelled consumer, d and p after that consumer's cancel
  and p before its channel's end (by index, or recorded at most 50 ms after
  its end's time: the clients' recording skew), is a *held reorder* (RabbitMQ keeps a
  cancelled consumer's unacked messages until its channel closes) and counts
  nowhere else. deliveries_checked: unflagged deliveries (strict: every one).
  Each example carries `phase_boundary`: the boundary nearest d's time (the
  first of equals) among the harness's phase events and its "stop-workers"
  observations, as f, phase (of the value), state (a phase event's, else
  null) and d's time minus its time in ms, or null without one;
  near_boundary_count counts the violations whose d is at most 1000 ms from
  a boundary.
- Fault windows. A window opens at the info or ok completion of a start f
  (start-partition, kill, stop, pause, start-packet, any start-X) and closes
  at the info/ok completion of its stop f (stop-partition, start, start,
  resume, stop-packet, stop-X) when the two targets share a node or either is
  unknown, or of "heal" (every window), or at the history's last time. A
  target is value["nodes"] (a list, or one name), else the op's node.
  Windows are listed by start, then end, then f.
- Perf. Each attempted publish at its invoke time; a window holds the
  publishes invoked in [start, end); healthy ones are in no window.
  Latencies are those of confirmed publishes (completion - invoke); quantiles
  are nearest-rank (the smallest value with at least that share at or below
  it). The first confirm at or after a window's end gives its recovery. The
  main phase runs from the first main-start event (else the history's first
  time) to the first main-end event (else its last time); the longest stretch
  of it without a confirm counts its edges as boundaries and prefers the
  earliest of equals.
- Fates. Each attempted message has one fate, the first that applies: lost
  (unproven when the drain did not complete and it is required, or the queue
  drops into the user's dead-letter exchange), unflagged or flagged
  duplicate, recovered, delivered after a nack, dropped by design (never
  delivered, dead-lettered), unconfirmed (never
  delivered, not confirmed), delivered in the drain (first acked - first
  delivered without acks - at or after the drain's first start event), else
  delivered. Counted per bucket of invoke time: the smallest of 1, 2 or 5 x
  10^k ms, at least 100 ms, giving at most 300 buckets over the history's
  span. Each message of an anomaly class (lost, lost_unacked, unexpected,
  unflagged and flagged duplicates, unflagged_after_ack) and each ordering
  violation's later message belongs to the first window whose end is at or
  after its publish's completion (else its invocation), or to none; per
  window, the count of each class and its first 10 ids in results.json's
  order.
- Priority: tests.checkers.oracle_priority says its rule and works it out.
- Loss told apart (queue.loss, when something was lost): tests.checkers.oracle_loss.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.checkers.oracle_loss import loss
from tests.checkers.oracle_priority import priority

HOLD_SKEW_NS = 50_000_000  # the clients' recording skew a hold window's end admits

ID_RE = re.compile(r"^([0-9]+)-([0-9]+)$")
STOPS = {"start-partition": "stop-partition", "kill": "start", "stop": "start",
         "pause": "resume", "start-packet": "stop-packet"}


def read_ops(path: Path) -> list[dict[str, Any]]:
    """Takes a JSONL history. Returns its ops (decoded lines, blank lines skipped), in order."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def client_of(process: Any) -> int | None:
    """Takes a process field. Returns the client's number, or None when it is not a client."""
    if isinstance(process, bool):
        return None
    if isinstance(process, int):
        return process
    if isinstance(process, str) and re.fullmatch(r"-?[0-9]+", process):
        return int(process)
    return None


def id_key(mid: str) -> tuple[int, int, int, str]:
    """Takes a message id. Returns its place in results.json's lists: by publisher, then seq,
    then ids of another form by text."""
    m = ID_RE.match(mid)
    return (0, int(m.group(1)), int(m.group(2)), mid) if m else (1, 0, 0, mid)


def ms(ns: float | None) -> float | None:
    """Takes nanoseconds. Returns milliseconds to three places, or None."""
    return None if ns is None else round(ns / 1e6, 3)


@dataclass
class Delivery:
    """One delivery and, when acked, the index of its ack."""

    index: int
    time: int
    process: int
    tag: str
    mid: str
    flagged: bool
    publisher: int | None
    seq: int | None
    ack_index: int | None = None
    priority: int | None = None


@dataclass
class Publish:
    """One message's publish: who invoked it when, and how it ended."""

    process: int
    invoked: int
    outcome: str | None = None
    completed: int | None = None
    error: str | None = None
    node: str | None = None
    queue: str | None = None


@dataclass
class Read:
    """A history, sorted into what the definitions speak of."""

    publishes: dict[str, Publish] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    acks_recorded: bool = False
    nemesis: list[dict[str, Any]] = field(default_factory=list)
    harness: list[dict[str, Any]] = field(default_factory=list)
    first_time: int = 0
    last_time: int = 0
    first_ack: dict[str, int] = field(default_factory=dict)
    dead: dict[str, list[str | None]] = field(default_factory=dict)
    ends: list[dict[str, Any]] = field(default_factory=list)
    # Whether some publish op carries a priority (ordering streams are then split by it).
    priorities: bool = False


def read(path: Path) -> Read:
    """Takes a history. Returns it sorted into publishes, deliveries (acks paired), nemesis ops
    and harness events."""
    ops = read_ops(path)
    r = Read()
    times = [op["time"] for op in ops]
    r.first_time, r.last_time = (min(times), max(times)) if times else (0, 0)
    waiting: Waiting = {}
    for op in ops:
        process = client_of(op["process"])
        if process is None:
            if op["process"] == "nemesis":
                r.nemesis.append(op)
            elif op["process"] == "harness":
                r.harness.append(op)
        elif op["f"] in ("cancel", "close"):
            r.ends.append(op)
        elif op.get("value") is not None and op["f"] in CLIENT_OPS:
            CLIENT_OPS[op["f"]](r, op, process, waiting)
    if not r.acks_recorded:
        for d in r.deliveries:
            d.ack_index = d.index
            r.first_ack[d.mid] = min(r.first_ack.get(d.mid, d.time), d.time)
    return r


# Deliveries waiting for their ack, per stream (process, consumer tag, message id), first in
# first out.
Waiting = dict[tuple[int, str, str], deque[Delivery]]


def read_publish(r: Read, op: dict[str, Any], process: int, waiting: Waiting) -> None:
    """Takes a publish op with a value. An invoke starts the message's publish, any other type
    completes it."""
    mid = op["value"]
    if op.get("priority") is not None:
        r.priorities = True
    if op["type"] == "invoke":
        r.publishes[mid] = Publish(process, op["time"])
    else:
        p = r.publishes[mid]
        p.outcome, p.completed, p.error = op["type"], op["time"], op.get("error")
        p.node, p.queue = op.get("node"), op.get("queue")


def read_delivery(r: Read, op: dict[str, Any], process: int, waiting: Waiting) -> None:
    """Takes a consume or drain op with a value. An ok one is a delivery: its publisher and seq
    its fields, else parsed from its id; it waits in its stream for its ack."""
    if op["type"] != "ok":
        return
    mid = op["value"]
    parsed = ID_RE.match(mid)
    pub = op.get("publisher")
    seq = op.get("seq")
    if pub is None and parsed:
        pub = int(parsed.group(1))
    if seq is None and parsed:
        seq = int(parsed.group(2))
    d = Delivery(op["index"], op["time"], process, op.get("consumer") or "", mid,
                 op.get("redelivered") is True, pub, seq, priority=op.get("priority"))
    r.deliveries.append(d)
    waiting.setdefault((process, d.tag, mid), deque()).append(d)


def read_dead_letter(r: Read, op: dict[str, Any], process: int, waiting: Waiting) -> None:
    """Takes a dead-letter op with a value. An ok one records its id's dead letter and
    reason."""
    if op["type"] == "ok":
        r.dead.setdefault(op["value"], []).append(op.get("reason"))


def read_ack(r: Read, op: dict[str, Any], process: int, waiting: Waiting) -> None:
    """Takes an ack op with a value. An ok one acks the first delivery waiting in its
    stream."""
    if op["type"] != "ok":
        return
    mid = op["value"]
    r.acks_recorded = True
    r.first_ack[mid] = min(r.first_ack.get(mid, op["time"]), op["time"])
    waiting[(process, op.get("consumer") or "", mid)].popleft().ack_index = op["index"]


# How each client op with a value is read, by its f; ops of other fs are not read.
CLIENT_OPS: dict[str, Callable[[Read, dict[str, Any], int, Waiting], None]] = {
    "publish": read_publish,
    "consume": read_delivery,
    "drain": read_delivery,
    "dead-letter": read_dead_letter,
    "ack": read_ack,
}


# -- queue ----------------------------------------------------------------------------------


def drain_complete(events: list[dict[str, Any]]) -> bool:
    """Takes harness events. Returns whether the drain's end says it completed."""
    end = None
    for e in events:
        v = e.get("value")
        if e["f"] == "phase" and isinstance(v, dict) and v.get("phase") == "drain" \
                and v.get("state") != "start":
            end = v
    return end is not None and end.get("state") == "end" and end.get("complete") in (None, True)


def dead_lettering(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Takes harness events. Returns the last "dead-lettering" observation's value, or None."""
    found = None
    for e in events:
        if e["f"] == "dead-lettering" and isinstance(e.get("value"), dict):
            found = e["value"]
    return found


def elsewhere(events: list[dict[str, Any]]) -> bool:
    """Takes harness events. Returns whether the queue drops by design into the user's
    dead-letter exchange (lost messages are then not proven lost)."""
    d = dead_lettering(events)
    return bool(d and d.get("by") == "user" and d.get("limits"))


def queue(r: Read, *, unflagged_duplicates_invalid: bool = True,
          flagged_duplicates_invalid: bool = False, require_drain: bool = True,
          unflagged_redeliveries_invalid: bool = False,
          sample_size: int = 100, example_size: int = 20) -> dict[str, Any]:
    """Takes a read history and the options. Returns the queue section's verdict, anomalies,
    counts, id lists (first `sample_size` in results.json's order) and fail reasons, and the
    loss told apart when something was lost (tests.checkers.oracle_loss)."""
    by_id: dict[str, list[Delivery]] = {}
    for d in r.deliveries:
        by_id.setdefault(d.mid, []).append(d)
    pubs = r.publishes
    attempted = set(pubs)
    received = set(by_id)
    acked = {m: [d for d in ds if d.ack_index is not None] for m, ds in by_id.items()}
    delivered = {m for m, ds in acked.items() if ds}
    acknowledged = {m for m in attempted if pubs[m].outcome == "ok"}
    failed = {m for m in attempted if pubs[m].outcome == "fail"}
    unknown = {m for m in attempted if pubs[m].outcome in ("info", None)}
    dead = set(r.dead)
    lost = acknowledged - delivered - dead
    dropped = (attempted & dead) - delivered
    duplicated = {m for m in attempted if len(acked.get(m, [])) > 1}
    unflagged_dup = {m for m in duplicated
                     if any(not d.flagged for d in sorted(acked[m], key=lambda d: d.index)[1:])}
    after_ack = set()
    for m, ds in by_id.items():
        flag_acks = [d.ack_index for d in ds if d.flagged and d.ack_index is not None]
        if flag_acks and any(not d.flagged and d.index > min(flag_acks) for d in ds):
            after_ack.add(m)
    unflagged_again = {m for m, ds in by_id.items()
                       if any(not d.flagged and d.time - min(x.time for x in ds) > 1_000_000_000
                              for d in sorted(ds, key=lambda d: d.index)[1:])}
    sets = {
        "lost": lost, "unexpected": received - attempted, "duplicated": duplicated,
        "redelivered_duplicated": duplicated - unflagged_dup,
        "unflagged_duplicated": unflagged_dup, "recovered": delivered & unknown,
        "delivered_failed": delivered & failed, "lost_unacked": lost & received,
        "unflagged_after_ack": after_ack, "unflagged_redelivered": unflagged_again,
        "dead_lettered_delivered": dead & delivered,
    }
    counts = {
        "attempt_count": len(attempted), "acknowledged_count": len(acknowledged),
        "ok_count": len(attempted & delivered), "fail_count": len(failed),
        "info_count": len(unknown), "delivery_count": len(r.deliveries),
        "acked_delivery_count": sum(len(ds) for ds in acked.values()),
        "dead_lettered_count": len(dead), "dropped_by_design_count": len(dropped),
        **{f"{k}_count": len(v) for k, v in sets.items()},
    }
    invalid = [k for k, on in (
        ("unexpected", True), ("unflagged_duplicated", unflagged_duplicates_invalid),
        ("unflagged_after_ack", unflagged_duplicates_invalid),
        ("unflagged_redelivered", unflagged_redeliveries_invalid),
        ("redelivered_duplicated", flagged_duplicates_invalid)) if on and sets[k]]
    drained = drain_complete(r.harness)
    if invalid or (lost and (drained or not require_drain) and not elsewhere(r.harness)):
        valid: bool | str = False
    elif lost:
        valid = "unknown"
    else:
        valid = True
    reasons = Counter(pubs[m].error if pubs[m].error is not None else "(none)" for m in failed)
    explained = ("lost", "lost_unacked", "unexpected", "unflagged_duplicated",
                 "unflagged_after_ack", "unflagged_redelivered", "redelivered_duplicated",
                 "delivered_failed", "recovered",
                 "dropped_by_design", "dead_lettered_delivered")
    sets_and_dropped = {**sets, "dropped_by_design": dropped}
    why = Counter(r.dead[m][0] if r.dead[m][0] is not None else "(none)" for m in dropped)
    why_order = sorted(why, key=lambda k: (-why[k], k))
    told = {"loss": loss(pubs, lost, r.harness, bucket_ns(r), example_size, id_key,
                         partitions(r))} if lost else {}
    return {
        **told,
        "valid": valid,
        "anomalies": [k for k in ("lost", "lost_unacked") if sets[k]] + invalid,
        "explanations": [k for k in explained if sets_and_dropped[k]],
        "drain_complete": drained,
        "acks_recorded": r.acks_recorded,
        **counts,
        **{k: sorted(v, key=id_key)[:sample_size] for k, v in sets.items()},
        "fail_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[
            :sample_size]),
        "dropped_by_design_reasons": {k: why[k] for k in why_order},
        "dropped_by_design_examples": {
            k: sorted((m for m in dropped if (r.dead[m][0] or "(none)") == k), key=id_key)[
                :sample_size] for k in why_order},
        "dead_lettering": dead_lettering(r.harness),
    }


# -- ordering -------------------------------------------------------------------------------


def _side(d: Delivery) -> dict[str, Any]:
    return {"id": d.mid, "seq": d.seq, "index": d.index, "time_ms": ms(d.time),
            "redelivered": d.flagged}


def held(r: Read) -> dict[str, list[tuple[int, int | None, int | None]]]:
    """Takes a read history. Returns, per message id, the (cancel index, channel end index or
    None, channel end time or None) of each cancelled consumer that held it."""
    cancelled: dict[tuple[int, str], int] = {}
    ended: dict[tuple[int, str], tuple[int, int]] = {}
    for op in r.ends:
        key = (client_of(op["process"]), op.get("consumer") or "")
        if op["f"] == "cancel" and op["type"] in ("invoke", "ok"):
            cancelled.setdefault(key, op["index"])  # type: ignore[arg-type]
        elif op["f"] == "close" and op["type"] != "invoke":
            ended.setdefault(key, (op["index"], op["time"]))  # type: ignore[arg-type]
    out: dict[str, list[tuple[int, int | None, int | None]]] = {}
    for key, at in cancelled.items():
        end, end_time = ended.get(key, (None, None))
        if end is not None and end < at:
            continue
        for d in r.deliveries:
            if (d.process, d.tag) == key and d.index < at and d.ack_index is None:
                out.setdefault(d.mid, []).append((at, end, end_time))
    return out


def boundaries(r: Read) -> list[dict[str, Any]]:
    """Takes a read history. Returns its harness phase events (value an object) and its
    stop-workers observations, in order."""
    return [e for e in r.harness if (e["f"] == "phase" and isinstance(e.get("value"), dict))
            or e["f"] == "stop-workers"]


def boundary(r: Read, t: int) -> dict[str, Any] | None:
    """Takes a read history and a time. Returns the nearest boundary to it (the first of
    equals) as f, phase, state (a phase event's) and the time's distance from it in ms, or
    None."""
    best = None
    for e in boundaries(r):
        if best is None or abs(t - e["time"]) < abs(t - best["time"]):
            best = e
    if best is None:
        return None
    v = best.get("value") if isinstance(best.get("value"), dict) else {}
    return {"f": best["f"], "phase": v.get("phase"),
            "state": v.get("state") if best["f"] == "phase" else None,
            "ms": ms(t - best["time"])}


def reorders(r: Read, strict: bool) -> dict[str, list[tuple[Delivery, Delivery]]]:
    """Takes a read history and the mode. Returns the out-of-order pairs (p, d) of each kind:
    violation, flagged, unconfirmed, held."""
    last: dict[tuple[Any, ...], Delivery] = {}
    last_unflagged: dict[tuple[Any, ...], Delivery] = {}
    kinds: dict[str, list[tuple[Delivery, Delivery]]] = {
        "violation": [], "flagged": [], "unconfirmed": [], "held": []}
    holds = held(r)
    for d in r.deliveries:
        if d.publisher is None or d.seq is None:
            continue
        key: tuple[Any, ...] = (d.publisher,) if strict else (d.process, d.tag, d.publisher)
        if r.priorities:
            key += (d.priority,)
        if strict:
            p = last.get(key)
            bad = p is not None and (d.seq < p.seq or (d.seq == p.seq and not d.flagged))
        elif d.flagged:
            p = last.get(key)
            bad = p is not None and d.seq < p.seq
        else:
            p = last_unflagged.get(key)
            bad = p is not None and d.seq <= p.seq
        if bad and p is not None:
            mine, theirs = r.publishes.get(d.mid), r.publishes.get(p.mid)
            if d.flagged and any(at < p.index and at < d.index and (
                    end is None or p.index < end or p.time <= end_time + HOLD_SKEW_NS)
                    for at, end, end_time in holds.get(d.mid, [])):
                kinds["held"].append((p, d))
            elif (mine is not None and theirs is not None and mine.process != theirs.process
                    and mine.outcome != "ok"):
                kinds["unconfirmed"].append((p, d))
            else:
                if strict or not d.flagged:
                    kinds["violation"].append((p, d))
                if d.flagged:
                    kinds["flagged"].append((p, d))
        last[key] = d
        if not d.flagged:
            last_unflagged[key] = d
    return kinds


def ordering(r: Read, *, strict: bool = False, example_size: int = 20,
             sample_size: int = 100) -> dict[str, Any]:
    """Takes a read history and the mode. Returns the ordering section's verdict, counts,
    consumers affected and examples."""
    kinds = reorders(r, strict)
    checked = sum(1 for d in r.deliveries if d.publisher is not None and d.seq is not None
                  and (strict or not d.flagged))

    def examples(kind: str) -> list[dict[str, Any]]:
        return [{"consumer": f"{d.process}/{d.tag}", "publisher": d.publisher,
                 "earlier": _side(p), "later": _side(d), "phase_boundary": boundary(r, d.time)}
                for p, d in kinds[kind][:example_size]]

    def near(d: Delivery) -> bool:
        return any(abs(d.time - e["time"]) <= 1_000_000_000 for e in boundaries(r))

    affected = sorted({(d.process, d.tag) for _, d in kinds["violation"]})
    return {
        "valid": not kinds["violation"],
        "strict": strict,
        "deliveries_checked": checked,
        "violation_count": len(kinds["violation"]),
        "consumers_affected_count": len(affected),
        "consumers_affected": [f"{p}/{t}" for p, t in affected][:sample_size],
        "examples": examples("violation"),
        "flagged_violation_count": len(kinds["flagged"]),
        "flagged_examples": examples("flagged"),
        "unconfirmed_reorder_count": len(kinds["unconfirmed"]),
        "unconfirmed_examples": examples("unconfirmed"),
        "held_reorder_count": len(kinds["held"]),
        "held_examples": examples("held"),
        "near_boundary_count": sum(1 for _, d in kinds["violation"] if near(d)),
        "near_boundary_ms": 1000.0,
        "by_priority": r.priorities,
    }


# -- fault windows and perf -----------------------------------------------------------------


def stop_of(f: str) -> str | None:
    """Takes a nemesis f. Returns the f that ends the fault it starts, or None."""
    if f in STOPS:
        return STOPS[f]
    return "stop-" + f[len("start-"):] if f.startswith("start-") else None


def target(op: dict[str, Any]) -> set[str] | None:
    """Takes a nemesis op. Returns the nodes it names, or None when it names none."""
    v = op.get("value")
    nodes = v.get("nodes") if isinstance(v, dict) else None
    if isinstance(nodes, list) and nodes:
        return {str(n) for n in nodes}
    if isinstance(nodes, str):
        return {nodes}
    return {op["node"]} if op.get("node") else None


def windows(r: Read) -> list[dict[str, Any]]:
    """Takes a read history. Returns its fault windows: f, stop_f, target (sorted list or None),
    start and end (ns), closed_by."""
    open_: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    for op in r.nemesis:
        if op["type"] not in ("info", "ok"):
            continue
        f, t = op["f"], op["time"]
        if f == "heal":
            done += [{**w, "end": max(t, w["start"]), "closed_by": "heal"} for w in open_]
            open_ = []
        elif stop_of(f) is not None:
            open_.append({"f": f, "stop_f": stop_of(f), "target": target(op), "start": t})
        else:
            mine = target(op)
            for w in list(open_):
                if w["stop_f"] == f and (w["target"] is None or mine is None
                                         or w["target"] & mine):
                    open_.remove(w)
                    done.append({**w, "end": max(t, w["start"]), "closed_by": f})
    done += [{**w, "end": max(r.last_time, w["start"]), "closed_by": "end-of-history"}
             for w in open_]
    for w in done:
        w["target"] = sorted(w["target"]) if w["target"] is not None else None
    return sorted(done, key=lambda w: (w["start"], w["end"], w["f"]))


def partitions(r: Read) -> list[tuple[int, int, dict[str, list[str]]]]:
    """Takes a read history. Returns each partition's window (start, end: ns) with the grudge
    its start's completion names (node -> the nodes it cannot reach), for those that name one."""
    grudges = {op["time"]: op["value"]["grudge"] for op in r.nemesis
               if op["f"] == "start-partition" and op["type"] in ("info", "ok")
               and isinstance(op.get("value"), dict)
               and isinstance(op["value"].get("grudge"), dict)}
    return [(w["start"], w["end"], {str(a): [str(b) for b in bs]
                                    for a, bs in grudges[w["start"]].items()})
            for w in windows(r) if w["f"] == "start-partition" and w["start"] in grudges]


def nearest_rank(values: list[int], q: float) -> int:
    """Takes ascending values and a quantile. Returns the smallest value with at least a share q
    of the values at or below it."""
    return values[max(1, math.ceil(q * len(values))) - 1]


def stats(pubs: list[Publish]) -> dict[str, Any]:
    """Takes publishes. Returns their counts, shares and confirm latency quantiles (ms)."""
    n = len(pubs)
    ok = sorted(p.completed - p.invoked for p in pubs
                if p.outcome == "ok" and p.completed is not None)
    fail = sum(p.outcome == "fail" for p in pubs)
    info = n - len(ok) - fail

    def share(k: int) -> float | None:
        return round(k / n, 6) if n else None

    lat = {q: ms(nearest_rank(ok, f)) if ok else None
           for q, f in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
    lat["max"] = ms(ok[-1]) if ok else None
    return {"invoked": n, "ok": len(ok), "fail": fail, "info": info, "ok_share": share(len(ok)),
            "fail_share": share(fail), "info_share": share(info), "latency_ms": lat}


def main_phase(r: Read) -> tuple[int, int]:
    """Takes a read history. Returns the main phase's start and end (ns)."""
    def first(state: str, default: int) -> int:
        for e in r.harness:
            v = e.get("value")
            if e["f"] == "phase" and isinstance(v, dict) and v.get("phase") == "main" \
                    and v.get("state") == state:
                return int(e["time"])
        return default
    return first("start", r.first_time), first("end", r.last_time)


def perf(r: Read) -> dict[str, Any]:
    """Takes a read history. Returns the perf section."""
    pubs = list(r.publishes.values())
    ws = windows(r)
    confirms = sorted(p.completed for p in pubs if p.outcome == "ok" and p.completed is not None)
    out = []
    for w in ws:
        inside = [p for p in pubs if w["start"] <= p.invoked < w["end"]]
        after = [c for c in confirms if c >= w["end"]]
        out.append({"f": w["f"], "stop_f": w["stop_f"], "target": w["target"],
                    "start_ms": ms(w["start"]), "end_ms": ms(w["end"]),
                    "duration_ms": ms(w["end"] - w["start"]), "closed_by": w["closed_by"],
                    **stats(inside), "recovery_ms": ms(after[0] - w["end"]) if after else None})
    healthy = [p for p in pubs if not any(w["start"] <= p.invoked < w["end"] for w in ws)]
    start, end = main_phase(r)
    bounds = [start, *(c for c in confirms if start <= c <= end), end]
    gap = (start, start)
    for a, b in itertools.pairwise(bounds):
        if b - a > gap[1] - gap[0]:
            gap = (a, b)
    return {
        "valid": True,
        "main_phase": {"start_ms": ms(start), "end_ms": ms(end)},
        "overall": stats(pubs),
        "healthy": stats(healthy),
        "longest_without_confirm": {"ms": ms(gap[1] - gap[0]), "from_ms": ms(gap[0]),
                                    "to_ms": ms(gap[1])},
        "windows": out,
    }


# -- fates and their attribution to faults --------------------------------------------------


def bucket_ns(r: Read) -> int:
    """Takes a read history. Returns the fates' bucket width: the smallest of 1, 2 or 5 times a
    power of ten ms, at least 100 ms, that cuts the history's span into at most 300."""
    need = max((r.last_time - r.first_time) / 1e6 / 300, 100)
    power = 10 ** math.floor(math.log10(need))
    return int(next(m for m in (1, 2, 5, 10) if m * power >= need) * power * 1_000_000)


def fates(r: Read, *, strict: bool = False, require_drain: bool = True) -> dict[str, Any]:
    """Takes a read history and the options. Returns the fates section: each attempted
    message's fate (the first that applies of: lost, or unproven without a proven drain;
    unflagged or flagged duplicate; recovered; delivered after a nack; unconfirmed and never
    delivered; delivered, in the drain when first consumed at or after the drain's start)
    counted per bucket of invoke time, and the anomalies by fault window (the first window
    ending at or after the message's completion, else its invocation; none without a
    publish), ordering violations by their later delivery's message."""
    acked: dict[str, list[Delivery]] = {}
    received: set[str] = set()
    for d in r.deliveries:
        received.add(d.mid)
        if d.ack_index is not None:
            acked.setdefault(d.mid, []).append(d)
    drained = (drain_complete(r.harness) or not require_drain) and not elsewhere(r.harness)
    drain_start = next((e["time"] for e in r.harness if e["f"] == "phase"
                        and isinstance(e.get("value"), dict)
                        and e["value"].get("phase") == "drain"
                        and e["value"].get("state") == "start"), None)
    width = bucket_ns(r)
    series: dict[str, Counter[int]] = {}
    classes: dict[str, set[str]] = {k: set() for k in (
        "lost", "lost_unacked", "unflagged_duplicated", "redelivered_duplicated",
        "unflagged_after_ack")}
    for m, p in r.publishes.items():
        ds = sorted(acked.get(m, []), key=lambda d: d.index)
        fate = fate_of(r, m, p, ds, drained=drained, drain_start=drain_start)
        if fate in ("lost", "unproven"):
            classes["lost"].add(m)
            if m in received:
                classes["lost_unacked"].add(m)
        elif fate in ("unflagged_duplicated", "redelivered_duplicated"):
            classes[fate].add(m)
        series.setdefault(fate, Counter())[p.invoked // width] += 1
    classes["unflagged_after_ack"] = unflagged_after_ack(r)
    tagged = [(m, k) for k, ms_ in classes.items() for m in ms_]
    tagged += [(m, "unexpected") for m in received - set(r.publishes)]
    tagged += [(d.mid, "reordered") for _, d in reorders(r, strict)["violation"]]
    return {"bucket_ms": ms(width), "drained": drained,
            "totals": {f: sum(c.values()) for f, c in series.items()},
            "series": {f: [[ms(b * width), n] for b, n in sorted(c.items())]
                       for f, c in series.items()},
            "by_fault": by_fault(r, tagged)}


def fate_of(r: Read, m: str, p: Publish, ds: list[Delivery], *, drained: bool,
            drain_start: int | None) -> str:
    """Takes a read history, an attempted message, its publish, its acked deliveries in index
    order, whether the drain is proven and when it started. Returns the message's fate, the
    first that applies (see `fates`)."""
    if p.outcome == "ok" and not ds and m not in r.dead:
        return "lost" if drained else "unproven"
    if len(ds) > 1:
        return ("unflagged_duplicated" if any(not d.flagged for d in ds[1:])
                else "redelivered_duplicated")
    if ds and p.outcome in ("info", None):
        return "recovered"
    if ds and p.outcome == "fail":
        return "delivered_failed"
    if not ds and m in r.dead:
        return "dropped_by_design"
    if not ds:
        return "unconfirmed"
    if drain_start is not None and r.first_ack.get(m, -1) >= drain_start:
        return "delivered_in_drain"
    return "delivered"


def unflagged_after_ack(r: Read) -> set[str]:
    """Takes a read history. Returns the ids with an unflagged delivery (acked or not) after
    the ack of a flagged delivery."""
    out = set()
    for m, ds in itertools.groupby(sorted(r.deliveries, key=lambda d: d.mid),
                                   key=lambda d: d.mid):
        mine = list(ds)
        flag_acks = [d.ack_index for d in mine if d.flagged and d.ack_index is not None]
        if flag_acks and any(not d.flagged and d.index > min(flag_acks) for d in mine):
            out.add(m)
    return out


def by_fault(r: Read, tagged: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Takes a read history and (id, class) pairs. Returns per fault window (in order, then
    none) the count of each class and its first 10 ids in results.json's order: an id belongs
    to the first window ending at or after its publish's completion, else its invocation (the
    last window when none ends so late), or to none without a publish or a window."""
    ws = windows(r)

    def window_of(m: str) -> int | None:
        p = r.publishes.get(m)
        t = None if p is None else p.completed if p.completed is not None else p.invoked
        if t is None or not ws:
            return None
        return next((i for i, w in enumerate(ws) if t <= w["end"]), len(ws) - 1)

    by: dict[int | None, dict[str, list[str]]] = {}
    for m, k in tagged:
        by.setdefault(window_of(m), {}).setdefault(k, []).append(m)
    return [{"window": w, "start_ms": ms(ws[w]["start"]) if w is not None else None,
             "end_ms": ms(ws[w]["end"]) if w is not None else None,
             "counts": {k: len(v) for k, v in by[w].items()},
             "examples": {k: sorted(v, key=id_key)[:10] for k, v in by[w].items()}}
            for w in sorted(by, key=lambda w: (w is None, w or 0))]


def judge(path: Path, *, strict_order: bool = False, unflagged_duplicates_invalid: bool = True,
          flagged_duplicates_invalid: bool = False, require_drain: bool = True,
          sample_size: int = 100, example_size: int = 20,
          unflagged_redeliveries_invalid: bool = False) -> dict[str, Any]:
    """Takes a history and the check's options. Returns what results.json must say of it: the
    whole verdict and the queue, ordering and perf sections' fields this oracle knows, and the
    priority section when the harness observed priorities (tests.checkers.oracle_priority)."""
    r = read(Path(path))
    sections = {
        "queue": queue(r, unflagged_duplicates_invalid=unflagged_duplicates_invalid,
                       flagged_duplicates_invalid=flagged_duplicates_invalid,
                       require_drain=require_drain, sample_size=sample_size,
                       unflagged_redeliveries_invalid=unflagged_redeliveries_invalid,
                       example_size=example_size),
        "ordering": ordering(r, strict=strict_order, example_size=example_size,
                             sample_size=sample_size),
        "perf": perf(r),
    }
    valids = [s["valid"] for s in sections.values()]
    found = priority(read_ops(Path(path)), example_size)
    if found is not None:  # composes only when false
        sections["priority"] = found
        valids += [False] if found["valid"] is False else []
    sections["fates"] = fates(r, strict=strict_order, require_drain=require_drain)
    valid = False if False in valids else "unknown" if "unknown" in valids else True
    return {"valid": valid, **sections}


def mismatches(got: Any, want: Any, path: str = "") -> list[str]:
    """Takes results.json as an engine wrote it and what the oracle says. Returns where they
    differ (paths like "queue.lost"), for every field the oracle gives; an oracle list of
    classes stands for a dict's keys in order (the queue's explanations)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {got!r} is not an object"]
        out = []
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                out += mismatches(got[k], v, f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, dict):
        got = list(got)
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [m for i, (g, w) in enumerate(zip(got, want, strict=True))
                for m in mismatches(g, w, f"{path}[{i}]")]
    return [] if got == want and type(got) is type(want) else [
        f"{path}: engine {got!r}, oracle {want!r}"]
