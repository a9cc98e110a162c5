"""The delayed-retry rule (checkers.retry) written apart from Spark, for the tests: a plain loop
over the history's ops, message by message. Tests require checkers.spark_retry to agree."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from history.faults import FaultWindow

DELIVERIES = ("consume", "drain")
SETTLES = ("ack", "reject", "nack")
NOT_JUDGED = ("drain_incomplete", "unbounded", "consumer_timeout", "return_path")
VIOLATIONS = ("early", "unflagged", "count_low", "past_limit", "gone")


def _held(settings: dict[str, Any], path: str) -> bool:
    kind = settings.get("type")
    return {"failed": kind in ("all", "failed"), "returned": kind in ("all", "returned")
            }.get(path, kind == "all")


def _least_ms(settings: dict[str, Any], path: str, count: int) -> int:
    if not _held(settings, path):
        return 0
    ms = (settings.get("min_ms") or 0) * max(1, count)
    return ms if settings.get("max_ms") is None else min(ms, settings["max_ms"])


def _end(ops: list[dict[str, Any]], d: dict[str, Any]) -> dict[str, Any] | None:
    """The first op after delivery d that ends its consumer, with `how`, else None."""
    for o in ops:
        if o["index"] <= d["index"] or o.get("process") != d["process"] \
                or o.get("consumer") != d["consumer"]:
            continue
        if o["type"] == "invoke" and o["f"] == "close" and o.get("by") == "harness":
            return {**o, "how": "close"}
        if o["type"] == "info" and o["f"] == "close" and o.get("by") == "broker":
            return {**o, "how": "timeout" if o.get("reply_code") == 406 else "lost"}
        if o["type"] == "ok" and o["f"] == "cancel" and o.get("by") == "broker":
            return {**o, "how": "timeout"}
    return None


def _lost_moment(ops: list[dict[str, Any]], d: dict[str, Any],
                 faults: Sequence[FaultWindow]) -> tuple[int | None, str, str | None]:
    """(moment ns or None, path, reason not judged or None) of a delivery lost with its
    consumer."""
    end = _end(ops, d)
    if end is None:
        return None, "failed", "no_end"
    if end["how"] == "timeout":
        return None, "failed", "consumer_timeout"
    other, kills = False, []
    for w in faults:
        lo = w.invoke_ns if w.invoke_ns is not None else w.start_ns
        if lo > end["time"] or w.end_ns < d["time"]:
            continue
        nodes = (w.value or {}).get("nodes") or ([w.node] if w.node else [])
        if w.f == "kill" and d.get("node") in nodes:
            kills.append(lo)
        elif w.f != "kill":
            other = True  # a kill of another node leaves the consumer's channel be
    if other:
        return None, "either" if kills else "failed", "unbounded"
    if kills:
        return min(kills), "either", None
    if end["how"] == "close":
        return end["time"], "failed", None
    return None, "failed", "unbounded"


def _outcome(settings: dict[str, Any], drain_complete: bool, tolerance_ms: int,
             o: dict[str, Any], kind: str, path_: str, moment: int | None, reason: str | None,
             rejects: int, nxt: dict[str, Any] | None, later: list[dict[str, Any]]) -> str:
    """The outcome of one return (checkers.retry's names)."""
    count = nxt.get("delivery_count") if nxt and nxt.get("delivery_count") is not None \
        else rejects
    limit = settings.get("delivery_limit")
    other_path = path_ == "either" or (
        kind == "nack" and nxt is not None
        and (nxt.get("delivery_count") or 0) > (o.get("delivery_count") or 0))
    if reason == "consumer_timeout" or (kind == "lost" and moment is None and reason == "no_end"):
        out = "consumer_timeout" if reason == "consumer_timeout" else "unbounded"
    elif nxt is None:
        out = ("dead_lettered" if any(p["f"] == "dead-letter" for p in later)
               else "gone" if drain_complete else "drain_incomplete")
    elif reason is not None:
        out = "unbounded" if reason == "no_end" else reason
    elif other_path and settings.get("type") != "all":
        out = "return_path"
    elif nxt.get("delivery_count") is not None and nxt["delivery_count"] < rejects:
        out = "count_low"
    elif nxt["time"] - moment < (_least_ms(settings, path_, count) - tolerance_ms) * 10**6:
        out = "early"
    elif not nxt.get("redelivered"):
        out = "unflagged"
    elif limit is not None and count > limit:
        out = "past_limit"
    else:
        out = "redelivered"
    return out


def judge(path: Path, settings: dict[str, Any], drain_complete: bool,
          faults: Sequence[FaultWindow] = (), tolerance_ms: int = 50) -> dict[str, Any]:
    """Takes a JSONL history, the settings, whether the drain completed and the fault windows.
    Returns {"counts": {(kind, outcome): n}, "examples": [(id, outcome), ...] in history
    order}."""
    ops = [orjson.loads(line) for line in path.read_text().splitlines() if line.strip()]
    mine = [o for o in ops if o.get("type") == "ok" and isinstance(o.get("process"), int)
            and o.get("value") is not None
            and o.get("f") in (*DELIVERIES, *SETTLES, "dead-letter")]
    counts: dict[tuple[str, str], int] = {}
    examples: list[tuple[int, str, str]] = []
    for k, o in enumerate(mine):
        later = [p for p in mine[k + 1:] if p["value"] == o["value"]]
        if o["f"] in ("reject", "nack"):
            kind, moment, reason = o["f"], o["time"], None
            path_ = "failed" if o["f"] == "reject" else "returned"
        elif o["f"] == "consume" and not (later and later[0]["f"] in SETTLES
                                          and later[0].get("consumer") == o.get("consumer")):
            kind = "lost"
            moment, path_, reason = _lost_moment(ops, o, faults)
        else:
            continue
        rejects = sum(1 for p in mine[:k + 1] if p["value"] == o["value"] and p["f"] == "reject")
        nxt = next((p for p in later if p["f"] in DELIVERIES), None)
        if kind == "lost" and nxt is not None and moment is not None and nxt["time"] < moment \
                and reason is None:
            reason = "unbounded"
        out = _outcome(settings, drain_complete, tolerance_ms, o, kind, path_, moment,
                       reason, rejects, nxt, later)
        counts[(kind, out)] = counts.get((kind, out), 0) + 1
        if out in VIOLATIONS:
            examples.append((o["index"], o["value"], out))
    return {"counts": counts, "examples": [(v, out) for _, v, out in sorted(examples)]}


def agrees(section: dict[str, Any], oracle: dict[str, Any]) -> bool:
    """Returns whether a Spark section and the oracle's judgement say the same, kind by kind."""
    got = {(kind, outcome): n for kind, facts in section["by_kind"].items()
           for outcome, n in facts["outcomes"].items()}
    return got == oracle["counts"] and [(e["id"], e["violation"]) for e in
                                        section["examples"]] == oracle["examples"][:5]
