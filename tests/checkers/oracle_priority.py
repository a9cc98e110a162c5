"""The oracle's priority rule (tests.checkers.oracle.judge gives its section), worked out again in
the plainest Python from the rule's text, for the tests only; it imports nothing of the project.

The rule, as this file applies it (written from RabbitMQ's documentation of quorum queue
priorities and issue 31):

- The section exists only when the history holds a harness observation f "priorities" (the
  last one counts). It is "not applicable" (valid "unknown") for an unknown line, a line
  without priority levels, a line that serves more than two levels at a ratio, or when no
  publish or delivery of the queue carries a priority. A line with two levels not served
  strictly (4.0) is judged by the two-level rule (the last point).
- Only publishes and ok consume/drain deliveries of the observed queue count (an op naming no
  queue counts); acks count whatever their queue. A consumer is (process, consumer tag).
- A level is the priority when below the line's levels, 4 without one (when the line has a
  level 4), else unknown. A message's level is that of its first invoke's priority.
- A delivery is returned when flagged redelivered or its delivery_count or acquired_count is
  above 0. Its consumer's prefetch is the observation's "consume" one for f "consume", else
  its "drain" one. Its bound is the index of its consumer's previous delivery when that
  prefetch is 1, and for an f "drain" delivery the index of the first harness phase event of
  the drain's start when that is greater; none without either. Its settlement is its
  consumer's last ack before it.
- Each delivery d is not judged, first that applies: returned, prefetch (not 1),
  priority_unknown, no_settlement. Otherwise, over the messages m published (any publish op)
  and delivered in the queue, with a known level above d's, whose first delivery (lowest
  index) is not returned and comes after d: m confirmed (an ok publish) before the settlement
  is sure when its key (its first delivery's index under single active consumer, else its
  first delivery's bound, -1 without) is at or after d's index. A sure m is *ripe* when
  its confirm's time is more than the skew margin (100 ms) before the settlement's time.
  Some ripe m: a violation, its witness the ripe m of greatest (key, id). Else some sure m:
  not judged, within_skew, its witness the sure m of greatest (key, id). Else some
  confirmed one: not judged, competing. Else judged in order, and set aside as unconfirmed
  when some m never confirmed (no ok at all) was invoked before the settlement.
- Valid false with a violation, true with a delivery judged, else "unknown" ("no delivery
  could be judged"); it composes only when false. Examples: the first violations by index;
  within_skew_examples: the first deliveries set aside by the margin, by index. The section
  states the margin (skew_margin_ms) and why (skew_margin_reason, the checker's sentence).
- The two-level rule (4.0's rabbit_fifo_q: a normal message enqueued after a ready high one
  never goes first). Levels: 1 for a priority above 4, 0 for one from 0 to 4 or none, unknown
  below 0. A delivery whose message has no publish invoke is not judged, priority_unknown
  (after returned and prefetch, before no_settlement). Its point is its message's first
  publish invoke when that comes before its settlement, else the settlement; m counts only
  when confirmed before the point (so before the settlement and before d's publish), and is
  ripe when its confirm's time is more than the margin before the point's, or when d's
  publish's time is more than the margin before the settlement's. Each example's delivery
  also gives its message's publish (index, time_ms, node).
"""

from __future__ import annotations

import re
from typing import Any

REASONS = ("returned", "prefetch", "priority_unknown", "no_settlement", "within_skew",
           "competing")
# The skew margin: a confirm recorded at most this long before the settlement is not ripe.
MARGIN_NS = 100_000_000
MARGIN_WHY = (
    "a higher message counts as ready only when its confirm was recorded more than the margin "
    "before the consumer's previous ack: an ack is recorded after its socket write, a confirm "
    "by another client thread as it reads it, so closer records do not say which the broker "
    "saw first (within_skew: set aside, not judged)")


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def _client(process: Any) -> bool:
    return (isinstance(process, int) and not isinstance(process, bool)) or (
        isinstance(process, str) and re.fullmatch(r"-?[0-9]+", process) is not None)


def _two(obs: dict[str, Any]) -> bool:
    return not obs.get("strict") and obs.get("levels") == 2


def _why_not(obs: dict[str, Any], ops: list[dict[str, Any]], mine: Any) -> str | None:
    line, levels = obs.get("line"), obs.get("levels")
    if line is None:
        return "the broker's release line is unknown"
    if not isinstance(levels, int):
        return f"RabbitMQ {line}'s quorum queues have no message priorities"
    if not obs.get("strict") and levels != 2:
        return f"{levels}-level priorities are served at a ratio (RabbitMQ {line}), not strictly"
    if not any(mine(op) and op.get("priority") is not None for op in ops):
        return "no message carried a priority"
    return None


def _level(priority: Any, levels: int, two: bool = False) -> int | None:
    if two:
        return 0 if priority is None else 1 if priority > 4 else 0 if priority >= 0 else None
    if priority is None:
        return 4 if levels > 4 else None
    return priority if 0 <= priority < levels else None


class _Read:
    """The queue's publishes and deliveries, each delivery with its consumer's facts."""

    def __init__(self, obs: dict[str, Any], ops: list[dict[str, Any]], mine: Any,
                 drain_start: int | None) -> None:
        self.levels = int(obs["levels"])
        self.two = _two(obs)
        prefetch = obs.get("prefetch") or {}
        self.invoked: dict[str, dict[str, Any]] = {}
        self.confirmed: dict[str, dict[str, Any]] = {}
        self.published: set[str] = set()
        self.deliveries: list[dict[str, Any]] = []
        self.first: dict[str, dict[str, Any]] = {}
        seen: dict[tuple[Any, str], list[int]] = {}
        acked: dict[tuple[Any, str], dict[str, Any]] = {}
        for op in ops:
            consumer = (int(op["process"]), op.get("consumer") or "")
            if op["f"] == "ack" and op["type"] == "ok":
                acked[consumer] = op
            elif op["f"] == "publish" and mine(op):
                self._publish(op)
            elif op["f"] in ("consume", "drain") and op["type"] == "ok" and mine(op):
                p = int(prefetch.get("consume" if op["f"] == "consume" else "drain", 0))
                before = seen.setdefault(consumer, [])
                bounds = ([before[-1]] if p == 1 and before else []) + (
                    [drain_start] if op["f"] == "drain" and drain_start is not None else [])
                d = {"op": op, "consumer": consumer, "prefetch": p, "s": acked.get(consumer),
                     "bound": max(bounds) if bounds else None,
                     "level": _level(op.get("priority"), self.levels, self.two),
                     "returned": op.get("redelivered") is True or max(
                         op.get("delivery_count") or 0, op.get("acquired_count") or 0) > 0}
                before.append(op["index"])
                self.deliveries.append(d)
                self.first.setdefault(op["value"], d)

    def _publish(self, op: dict[str, Any]) -> None:
        mid = op["value"]
        self.published.add(mid)
        if op["type"] == "invoke":
            self.invoked.setdefault(mid, op)
        elif op["type"] == "ok":
            self.confirmed.setdefault(mid, op)

    def level_of(self, mid: str) -> int | None:
        inv = self.invoked.get(mid)
        return None if inv is None else _level(inv.get("priority"), self.levels, self.two)


def _why(r: _Read, d: dict[str, Any]) -> str | None:
    if d["returned"]:
        return "returned"
    if d["prefetch"] != 1:
        return "prefetch"
    if d["level"] is None or (r.two and d["op"]["value"] not in r.invoked):
        return "priority_unknown"
    return "no_settlement" if d["s"] is None else None


def _judge(r: _Read, d: dict[str, Any], sac: bool) -> tuple[str, bool, str | None]:
    """Returns a delivery's verdict, whether an unconfirmed message overtook it, and the
    witness of a violation."""
    at, settled, settled_at = d["op"]["index"], d["s"]["index"], d["s"]["time"]
    causal = False
    if r.two:  # counted up to the earlier of the settlement and d's publish
        inv = r.invoked[d["op"]["value"]]
        causal = settled_at - inv["time"] > MARGIN_NS
        if inv["index"] < settled:
            settled, settled_at = inv["index"], inv["time"]
    sure: list[tuple[int, str]] = []
    ripe: list[tuple[int, str]] = []
    confirmed = unconfirmed = False
    for mid, first in r.first.items():
        level = r.level_of(mid)
        if mid not in r.published or level is None or level <= d["level"] \
                or first["returned"] or first["op"]["index"] <= at:
            continue
        ok = r.confirmed.get(mid)
        if ok is not None and ok["index"] < settled:
            confirmed = True
            key = first["op"]["index"] if sac else (
                first["bound"] if first["bound"] is not None else -1)
            if key >= at:
                sure.append((key, mid))
                if causal or settled_at - ok["time"] > MARGIN_NS:
                    ripe.append((key, mid))
        elif ok is None and mid in r.invoked and r.invoked[mid]["index"] < settled:
            unconfirmed = True
    if ripe:
        return "violation", unconfirmed, max(ripe)[1]
    if sure:
        return "within_skew", unconfirmed, max(sure)[1]
    return ("competing" if confirmed else "in_order"), unconfirmed, None


def _example(r: _Read, d: dict[str, Any], mid: str) -> dict[str, Any]:
    op, first, inv, ok = d["op"], r.first[mid], r.invoked[mid], r.confirmed[mid]
    delivery = {"id": op["value"], "priority": op.get("priority"), "level": d["level"],
                "index": op["index"], "time_ms": _ms(op["time"]), "node": op.get("node")}
    if r.two:
        mine = r.invoked[op["value"]]
        delivery["published"] = {"index": mine["index"], "time_ms": _ms(mine["time"]),
                                 "node": mine.get("node")}
    return {
        "consumer": f"{d['consumer'][0]}/{d['consumer'][1]}",
        "delivery": delivery,
        "settled": {"index": d["s"]["index"], "time_ms": _ms(d["s"]["time"])},
        "overtaken_by": {
            "id": mid, "priority": inv.get("priority"), "level": r.level_of(mid),
            "published": {"index": inv["index"], "time_ms": _ms(inv["time"]),
                          "node": inv.get("node")},
            "confirmed": {"index": ok["index"], "time_ms": _ms(ok["time"])},
            "delivered": {"index": first["op"]["index"], "time_ms": _ms(first["op"]["time"]),
                          "node": first["op"].get("node"),
                          "consumer": f"{first['consumer'][0]}/{first['consumer'][1]}"}},
    }


def priority(ops: list[dict[str, Any]], example_size: int = 20) -> dict[str, Any] | None:
    """Takes a history's ops. Returns the priority section, or None without an observation."""
    found = [op["value"] for op in ops if op["process"] == "harness"
             and op["f"] == "priorities" and isinstance(op.get("value"), dict)]
    if not found:
        return None
    obs, queue = found[-1], found[-1].get("queue")
    clients = [op for op in ops if _client(op["process"]) and op.get("value") is not None]

    def mine(op: dict[str, Any]) -> bool:
        return queue is None or op.get("queue") in (None, queue)

    head = {"queue": queue, "line": obs.get("line"), "levels": obs.get("levels"),
            "strict": bool(obs.get("strict")),
            "single_active_consumer": bool(obs.get("single_active_consumer"))}
    why = _why_not(obs, [op for op in clients if op["f"] == "publish" or (
        op["f"] in ("consume", "drain") and op["type"] == "ok")], mine)
    if why is not None:
        return {"valid": "unknown", "composes_only_when_false": True, "applicable": False,
                "reason": f"not applicable: {why}", **head}
    drain_start = next((op["index"] for op in ops if op["process"] == "harness"
                        and op["f"] == "phase" and isinstance(op.get("value"), dict)
                        and op["value"].get("phase") == "drain"
                        and op["value"].get("state") == "start"), None)
    r = _Read(obs, clients, mine, drain_start)
    counts = dict.fromkeys(REASONS, 0)
    verdicts = {"violation": 0, "in_order": 0}
    set_aside = 0
    examples: dict[str, list[dict[str, Any]]] = {"violation": [], "within_skew": []}
    for d in r.deliveries:
        reason = _why(r, d)
        if reason is None:
            reason, unconfirmed, witness = _judge(r, d, bool(obs.get("single_active_consumer")))
            set_aside += reason == "in_order" and unconfirmed
            if witness is not None and len(examples[reason]) < example_size:
                examples[reason].append(_example(r, d, witness))
        if reason in verdicts:
            verdicts[reason] += 1
        else:
            counts[reason] += 1
    judged = verdicts["violation"] + verdicts["in_order"]
    valid: bool | str = False if verdicts["violation"] else True if judged else "unknown"
    return {"valid": valid, "composes_only_when_false": True, "applicable": True,
            "reason": "no delivery could be judged" if valid == "unknown" else None, **head,
            "delivery_count": len(r.deliveries), "judged_count": judged,
            "violation_count": verdicts["violation"], "not_judged_count": sum(counts.values()),
            "not_judged": counts, "unconfirmed_set_aside_count": set_aside,
            "skew_margin_ms": _ms(MARGIN_NS), "skew_margin_reason": MARGIN_WHY,
            "examples": examples["violation"], "within_skew_examples": examples["within_skew"]}
