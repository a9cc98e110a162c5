"""The pure-Python oracle of settlement after a heal (checkers.settlement): the facts read op by
op from the JSONL history, with no Spark, then judged by the same rules (a publish's kind and
status stated here in Python, as checkers.settlement's docstring words them); the Spark job
(checkers.spark_settlement) must agree with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkers import settlement as S
from checkers.phases import HarnessEvent
from tests.checkers.oracle import client_of, main_phase, read, read_ops, windows


def completion_kind(code: str | None, error: str | None) -> str:
    """Takes a publish completion's type ("ok", "fail", "info"; None: it has none) and error.
    Returns how it completed (checkers.settlement's kinds): CONFIRMED, REFUSED, CLOSED (its
    connection or channel closed), or the client's own ends: GAVE_UP (its deadline), RUN_ENDED
    (closed at the run's end), BLOCKED, CONFIRMS_OFF; NONE without a completion."""
    if code is None:
        return S.NONE
    if code == "ok":
        return S.CONFIRMED
    if code == "fail":
        return S.REFUSED
    text = (error or "").removeprefix(S.ABANDONED_PREFIX)
    if text == S.BLOCKED_ERROR:
        return S.BLOCKED
    if text == S.CONFIRMS_OFF_ERROR:
        return S.CONFIRMS_OFF
    if text.startswith(S.TIMEOUT_PREFIX):
        return S.GAVE_UP
    if text.startswith(S.CLOSE_PREFIX):
        return S.RUN_ENDED
    return S.CLOSED


def publish_status(invoke: int, end: int | None, kind: str, heal: S.Heal, bound: int) -> str:
    """Takes a publish across a heal: its invocation and completion (ns; None: none), how it
    completed (`completion_kind`), the heal and the bound (ns). Returns its status (the
    rules of checkers.settlement; a publish the run's end closed before its deadline is
    unknown)."""
    deadline = max(invoke, heal.at) + bound
    if kind in (S.BLOCKED, S.CONFIRMS_OFF):
        return S.NOT_JUDGED
    if end is not None and end <= deadline:
        if kind in S.SETTLING_KINDS:
            return S.SETTLED
        return S.GIVEN_UP if kind == S.GAVE_UP else S.UNKNOWN
    if heal.next_fault is not None and deadline > heal.next_fault:
        return S.INTERRUPTED
    if end is None:
        return S.UNKNOWN  # the history was cut (a client ends what it sent, info at the latest)
    return S.STUCK


def heals(path: Path) -> list[S.Heal] | None:
    """Takes a history. Returns its heals (None when a fault was never healed)."""
    ws = windows(read(path))
    if any(w["closed_by"] == "end-of-history" for w in ws):
        return None
    out = []
    for w in sorted(ws, key=lambda w: w["end"]):
        at = w["end"]
        if any(x["start"] <= at < x["end"] for x in ws) or any(h.at == at for h in out):
            continue
        later = [x["start"] for x in ws if x["start"] > at]
        out.append(S.Heal(at, w["f"], min(later) if later else None))
    return out


def publishes(ops: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    """Takes the ops. Returns each publish by (process, id): invoke, its last completion (end,
    code, error), node and queue."""
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for op in ops:
        pid = client_of(op["process"])
        if pid is None or op["f"] != "publish" or op.get("value") is None:
            continue
        p = out.setdefault((pid, op["value"]), {"invoke": None, "end": None, "code": None,
                                                "error": None, "node": None, "queue": None})
        if op["type"] == "invoke":
            p["invoke"] = op["time"] if p["invoke"] is None else min(p["invoke"], op["time"])
        elif p["end"] is None or op["time"] >= p["end"]:
            p.update(end=op["time"], code=op["type"], error=op.get("error"))
        for k in ("node", "queue"):
            if op.get(k) is not None:
                p[k] = max(p[k] or op[k], op[k])
    return {k: p for k, p in out.items() if p["invoke"] is not None}


def _crosses(p: dict[str, Any], h: S.Heal) -> bool:
    """Whether a publish crossed a heal: in flight at it, or sent after it before the next
    fault."""
    return (p["end"] is None or p["end"] >= h.at) and (h.next_fault is None
                                                       or p["invoke"] < h.next_fault)


def judged_at(p: dict[str, Any], kind: str, hs: list[S.Heal],
              bound: int) -> tuple[int, str] | None:
    """Takes a publish, how it completed, the heals and the bound (ns). Returns the heal it is
    judged at and its status there: the first heal it crosses where it is not interrupted, else
    the last it crosses (interrupted); None when it crossed none."""
    out = None
    for i, h in enumerate(hs):
        if not _crosses(p, h):
            continue
        out = (i, publish_status(p["invoke"], p["end"], kind, h, bound))
        if out[1] != S.INTERRUPTED:
            return out
    return out


def crossed(ops: list[dict[str, Any]], hs: list[S.Heal], bound: int) -> list[dict[str, Any]]:
    """Returns the publishes that crossed a heal, each with pid, value, heal, kind, status."""
    out = []
    for (pid, value), p in publishes(ops).items():
        kind = completion_kind(p["code"], p["error"])
        at = judged_at(p, kind, hs, bound)
        if at is None:
            continue
        out.append({**p, "pid": pid, "value": value, "heal": at[0], "kind": kind,
                    "status": at[1]})
    return out


def _fate(p: dict[str, Any]) -> S.Fate:
    return S.Fate(p["value"], p["invoke"], p["end"], p["kind"], p["status"])


def channels(ops: list[dict[str, Any]], rows: list[dict[str, Any]],
             hs: list[S.Heal]) -> list[S.StuckChannel]:
    """Returns the channels with a stuck publish, with their timelines."""
    out = []
    for heal, pid in sorted({(p["heal"], p["pid"]) for p in rows if p["status"] == S.STUCK}):
        mine = sorted((p for p in rows if (p["heal"], p["pid"]) == (heal, pid)),
                      key=lambda p: (p["invoke"], p["value"]))
        stuck = [p for p in mine if p["status"] == S.STUCK]
        first = stuck[0]
        later = [p for p in mine if p["invoke"] > first["invoke"]]
        counts: dict[str, int] = {}
        for p in later:
            counts[p["status"]] = counts.get(p["status"], 0) + 1
        confirms = [p["end"] for (q, _v), p in publishes(ops).items()
                    if q == pid and p["code"] == "ok" and p["end"] < hs[heal].at]
        out.append(S.StuckChannel(
            heal, pid, first["node"], first["queue"], len(stuck), _fate(first),
            max(confirms) if confirms else None, tuple(_fate(p) for p in later[:S.LATER_SHOWN]),
            dict(sorted(counts.items()))))
    return out


def consumers(ops: list[dict[str, Any]], hs: list[S.Heal], bound: int, acks: bool,
              whole_log: bool = False) -> list[S.ConsumerFacts]:
    """Returns each main-phase consumer process's facts around each heal; on a log every
    consumer reads whole (`whole_log`), with how many messages confirmed before the heal had
    not reached it by heal + bound."""
    confirmed = {v: p["end"] for (_pid, v), p in publishes(ops).items() if p["code"] == "ok"}
    mine: dict[int, list[dict[str, Any]]] = {}
    for op in ops:
        pid = client_of(op["process"])
        if pid is not None:
            mine.setdefault(pid, []).append(op)
    out = []
    for pid, its in sorted(mine.items()):
        fed = [o for o in its if o["f"] == "consume" and o["type"] == "ok"
               and o.get("value") is not None]
        if not fed:
            continue
        ends = [o["time"] for o in its if o["f"] in ("cancel", "close")]
        acked = [o["time"] for o in its if o["f"] == "ack" and o["type"] == "ok"
                 and o.get("value") is not None]
        for i, h in enumerate(hs):
            before = [o["time"] for o in fed if o["time"] < h.at]
            after = [o["time"] for o in fed if o["time"] >= h.at]
            out.append(S.ConsumerFacts(
                i, pid, max(o["node"] for o in fed), max(o["queue"] for o in fed),
                max(before) if before else None, min(after) if after else None,
                min(ends) if ends else None,
                sum(o["time"] <= h.at + bound for o in fed),
                sum(t <= h.at + bound for t in acked) if acks else None,
                _owed(fed, confirmed, h, bound) if whole_log else None))
    return out


def _owed(fed: list[dict[str, Any]], confirmed: dict[str, int], h: S.Heal, bound: int) -> int:
    """Takes a consumer's deliveries, the confirmed messages (id: when), a heal and the bound.
    Returns how many messages confirmed before the heal it had not received by heal + bound."""
    got = {o["value"] for o in fed if o["time"] <= h.at + bound}
    return sum(1 for v, t in confirmed.items() if t < h.at and v not in got)


def settlement(path: Path, bound: int) -> dict[str, Any] | None:
    """Takes a history and the liveness bound (ns). Returns the settlement part of its liveness
    section, or None without a heal."""
    hs = heals(path)
    if not hs:
        return None
    ops, r = read_ops(path), read(path)
    main_end = main_phase(r)[1]
    rows = crossed(ops, hs, bound)
    counts: dict[tuple[int, str], int] = {}
    for p in rows:
        counts[(p["heal"], p["status"])] = counts.get((p["heal"], p["status"]), 0) + 1
    harness = [HarnessEvent(e["time"], e["f"], e.get("value"), e.get("node")) for e in r.harness]
    return S.settlement_section(counts, channels(ops, rows, hs),
                                consumers(ops, hs, bound, r.acks_recorded,
                                          S.reads_whole_log(harness, None)), hs, bound,
                                main_end, harness)
