"""A planted run whose results.json has the four newer promise sections (priority, delayed retry,
consumer timeout, metadata after the heal), each as the checker writes it, with the series
the report plots, and a history with a partition of n3 from about 2 s to 5 s for the shading."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.checkers.histories import Builder

RUN = "20261127T130000.000000Z"
PRIORITY: dict[str, Any] = {
    "valid": False, "false_only": True, "applicable": True, "reason": None, "queue": "q",
    "line": "4.3", "levels": 32, "strict": True, "single_active_consumer": False,
    "delivery_count": 1200, "judged_count": 847, "violation_count": 1,
    "not_judged_count": 353,
    "not_judged": {"returned": 11, "prefetch": 0, "priority_unknown": 0, "no_settlement": 3,
                   "within_skew": 1, "competing": 338},
    "unconfirmed_set_aside_count": 2, "skew_margin_ms": 100.0,
    "skew_margin_reason": "an ack is recorded after its write, a confirm on another thread",
    "examples": [{
        "consumer": "5/c5",
        "delivery": {"id": "1-40", "priority": 1, "level": 1, "index": 420, "time_ms": 2410.5,
                     "node": "n2"},
        "settled": {"index": 418, "time_ms": 2400.0},
        "overtaken_by": {"id": "1-41", "priority": 9, "level": 9,
                         "published": {"index": 400, "time_ms": 2300.0, "node": "n1"},
                         "confirmed": {"index": 402, "time_ms": 2310.0},
                         "delivered": {"index": 430, "time_ms": 2500.0, "node": "n2",
                                       "consumer": "5/c5"}}}],
    "within_skew_examples": [{
        "consumer": "5/c5",
        "delivery": {"id": "2-7", "priority": None, "level": 4, "index": 520, "time_ms": 3401.6,
                     "node": "n2"},
        "settled": {"index": 519, "time_ms": 3400.62},
        "overtaken_by": {"id": "3-9", "priority": 5, "level": 5,
                         "published": {"index": 511, "time_ms": 3362.6, "node": "n3"},
                         "confirmed": {"index": 518, "time_ms": 3399.75},
                         "delivered": {"index": 526, "time_ms": 3409.8, "node": "n2",
                                       "consumer": "5/c5"}}}]}
RETRY: dict[str, Any] = {
    "valid": False, "settings": {"queue": "q", "type": "all", "min_ms": 200, "max_ms": 500,
                                 "delivery_limit": 3},
    "tolerance_ms": 50, "returns": 63, "judged": 61, "redelivered": 58, "dead_lettered": 1,
    "not_judged": {"nack": 2, "drain_incomplete": 0}, "violation_count": 2,
    "violations": {"early": 1, "unflagged": 1, "past_limit": 0, "gone": 0},
    "examples": [{"id": "1-7", "violation": "early", "reject_index": 301, "count": 1,
                  "delay_ms": 98.0,
                  "timeline": [{"index": 300, "ms": 3000.0, "f": "consume", "consumer": "c5",
                                "redelivered": False, "delivery_count": None},
                               {"index": 301, "ms": 3001.0, "f": "reject", "consumer": "c5",
                                "redelivered": None, "delivery_count": None},
                               {"index": 305, "ms": 3099.0, "f": "consume", "consumer": "c6",
                                "redelivered": True, "delivery_count": 1}]}],
    "note": "the queue leader's wall clock decides when a delayed message is ready again",
    "delays": {"of": 60, "limit": 1000, "sample": [
        {"ms": 100.0 * k, "delay_ms": 210.0 + (k % 3) * 200, "bound_ms": 200.0 + (k % 3) * 200,
         "count": 1 + k % 3, "outcome": "redelivered"} for k in range(1, 59)] + [
        {"ms": 3001.0, "delay_ms": 98.0, "bound_ms": 200.0, "count": 1, "outcome": "early"},
        {"ms": 4001.0, "delay_ms": 420.0, "bound_ms": 400.0, "count": 2,
         "outcome": "unflagged"}]}}
TIMEOUT: dict[str, Any] = {
    "valid": True, "settings": {"queue": "q", "timeout_ms": 5000},
    "broker_cancels": 2, "broker_channel_closes": 0,
    "ended_by": {"cancel": 2, "channel_close_406": 0}, "held_judged": 3, "redelivered": 2,
    "dead_lettered": 1, "acked_after_end": 1, "not_judged": {"drain_incomplete": 0},
    "violation_count": 0,
    "violations": {"delivered_after_cancel": 0, "unflagged": 0, "lost": 0, "stalled": 0,
                   "cancel_without_capability": 0}, "examples": [],
    "held": {"of": 3, "limit": 1000, "sample": [
        {"cancel_ms": 5200.0, "cancel_index": 500, "consumer": "c5", "id": "1-0",
         "held_ms": 5100.0, "outcome": "redelivered"},
        {"cancel_ms": 5200.0, "cancel_index": 500, "consumer": "c5", "id": "1-1",
         "held_ms": 5050.0, "outcome": "dead_lettered"},
        {"cancel_ms": 7300.0, "cancel_index": 700, "consumer": "c7", "id": "1-9",
         "held_ms": 5020.0, "outcome": "redelivered"}]}}


def _timeline() -> dict[str, Any]:
    series = []
    for t in range(0, 8000, 1000):
        for node in ("n1", "n2", "n3"):
            cut = node == "n3" and 2000 <= t < 5000
            series.append({"node": node, "t_ms": t, "outcome": "ok", "n": 2 if cut else 8})
            if cut:
                series += [{"node": node, "t_ms": t, "outcome": "refused_541", "n": 1},
                           {"node": node, "t_ms": t, "outcome": "no_answer", "n": 1}]
    return {"bucket_ms": 1000, "series": series}


def _probe_node(node: str, ok: int, fail: int, info: int) -> dict[str, Any]:
    errors = ([{"type": "fail", "error": "541 INTERNAL_ERROR - failed to declare queue "
                "'<probe queue>' in vhost '/' because the operation timed out",
                "reply_code": 541, "count": fail}] if fail else [])
    return {"node": node, "ok": ok, "fail": fail, "info": info,
            "ops": {"declare": {"ok": ok, "fail": fail, "info": info}}, "errors": errors,
            "more_errors": 0}


METADATA: dict[str, Any] = {
    "false_only": True, "bound_ms": 2000.0, "bound": None,
    "probe": {"nodes": ["n1", "n2", "n3"], "interval_s": 0.5, "timeout_s": 0.3},
    "windows": [{"window": 0, "fault": "partition-one", "f": "start-partition", "target": ["n3"],
                 "start_ms": 2000.0, "end_ms": 5000.0, "closed_by": "stop-partition",
                 "nodes": [_probe_node("n1", 24, 0, 0), _probe_node("n3", 6, 3, 3)]}],
    "outside_faults": [_probe_node("n1", 40, 0, 0), _probe_node("n3", 40, 0, 0)],
    "findings": [], "valid": True, "status": "served", "last_heal_ms": 5000.0,
    "last_heal": {"fault": "partition-one", "closed_by": "stop-partition"},
    "main_after_heal_ms": 3000.0, "judged": True,
    "nodes": [{"node": "n1", "ok": 64, "fail": 0, "info": 0,
               "after_heal": {"status": "served", "valid": True,
                              "reason": "a declare was answered 0.1 s after the last heal",
                              "first_served_ms": 115.0}},
              {"node": "n3", "ok": 46, "fail": 3, "info": 3,
               "after_heal": {"status": "served", "valid": True,
                              "reason": "a declare was answered 1.1 s after the last heal",
                              "first_served_ms": 1114.5, "last_served_before_ms": -3100.0,
                              "probes_after": 12, "refused_after": 2,
                              "last_refused_ms": 600.0, "refused_past_bound_ms": None}}],
    "summary": "every probed node (2) served metadata again within 2 s of the last heal; "
               "6 probe op(s) refused or unanswered in all",
    "timeline": _timeline()}


def results() -> dict[str, Any]:
    """Returns the planted results.json (a fresh copy): invalid (priority and delayed retry
    found one)."""
    return copy.deepcopy({"valid": False,
            "queue": {"valid": True, "attempt_count": 80, "acknowledged_count": 80,
                      "ok_count": 80, "lost_count": 0, "unexpected_count": 0,
                      "duplicated_count": 0, "recovered_count": 0, "drain_complete": True},
            "priority": PRIORITY, "delayed_retry": RETRY, "consumer_timeout": TIMEOUT,
            "metadata": METADATA})


def make_run(store: Path) -> Path:
    """Writes the planted run under store/promises/RUN. Returns its directory."""
    run = store / "promises" / RUN
    run.mkdir(parents=True)
    with Builder(run / "history.jsonl") as b:
        b.priorities()
        b.phase("main", "start")
        for k in range(80):
            b.at(100 * k).publish(1, k, priority=9 if k % 2 else 1)
            b.at(100 * k + 20).deliver(5, f"1-{k}", priority=9 if k % 2 else 1)
            b.ack(5, f"1-{k}")
            if k == 20:
                b.at(2050).nemesis("start-partition", {"n3": ["n1", "n2"]}, node="n3")
            if k == 50:
                b.at(5050).nemesis("stop-partition", None)
        b.at(8000).phase("main", "end")
    (run / "results.json").write_text(json.dumps(results()), encoding="utf-8")
    (run / "test.json").write_text(json.dumps({"name": "promises", "seed": 1}), encoding="utf-8")
    return run
