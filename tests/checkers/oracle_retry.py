"""The delayed-retry rule (checkers.retry) written apart from Spark, for the tests: a plain loop
over the history's ops, message by message. Tests require checkers.spark_retry to agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

DELIVERIES = ("consume", "drain")


def _least_ms(settings: dict[str, Any], count: int) -> int:
    if settings.get("type") not in ("all", "failed"):
        return 0
    ms = (settings.get("min_ms") or 0) * count
    return ms if settings.get("max_ms") is None else min(ms, settings["max_ms"])


def judge(path: Path, settings: dict[str, Any], drain_complete: bool,
          tolerance_ms: int = 50) -> dict[str, Any]:
    """Takes a JSONL history, the settings, whether the drain completed. Returns
    {"counts": {outcome: n}, "examples": [(id, outcome), ...] in history order}."""
    ops = [orjson.loads(line) for line in path.read_text().splitlines() if line.strip()]
    mine = [o for o in ops if o.get("type") == "ok" and isinstance(o.get("process"), int)
            and o.get("value") is not None
            and o.get("f") in (*DELIVERIES, "reject", "nack", "dead-letter")]
    counts: dict[str, int] = {}
    examples: list[tuple[int, str, str]] = []
    for k, o in enumerate(mine):
        if o["f"] not in ("reject", "nack"):
            continue
        later = [p for p in mine[k + 1:] if p["value"] == o["value"]]
        rejects = sum(1 for p in mine[:k + 1] if p["value"] == o["value"] and p["f"] == "reject")
        nxt = next((p for p in later if p["f"] in DELIVERIES), None)
        count = nxt.get("delivery_count") if nxt and nxt.get("delivery_count") is not None \
            else rejects
        limit = settings.get("delivery_limit")
        if o["f"] == "nack":
            out = "nack"
        elif nxt is None:
            out = ("dead_lettered" if any(p["f"] == "dead-letter" for p in later)
                   else "gone" if drain_complete else "drain_incomplete")
        elif nxt.get("delivery_count") is not None and nxt["delivery_count"] < rejects:
            out = "count_low"
        elif nxt["time"] - o["time"] < (_least_ms(settings, count) - tolerance_ms) * 1_000_000:
            out = "early"
        elif not nxt.get("redelivered"):
            out = "unflagged"
        elif limit is not None and count > limit:
            out = "past_limit"
        else:
            out = "redelivered"
        counts[out] = counts.get(out, 0) + 1
        if out in ("early", "unflagged", "count_low", "past_limit", "gone"):
            examples.append((o["index"], o["value"], out))
    return {"counts": counts, "examples": [(v, out) for _, v, out in sorted(examples)]}


def agrees(section: dict[str, Any], oracle: dict[str, Any]) -> bool:
    """Returns whether a Spark section and the oracle's judgement say the same."""
    got = {**section["violations"], **section["not_judged"],
           "redelivered": section["redelivered"], "dead_lettered": section["dead_lettered"]}
    got = {k: v for k, v in got.items() if v}
    return got == oracle["counts"] and [(e["id"], e["violation"]) for e in
                                        section["examples"]] == oracle["examples"][:5]
