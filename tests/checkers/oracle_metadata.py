"""An oracle of the metadata section, for tests only: results.json's "metadata" worked out
again from its rules, in plain Python, beside tests/checkers/oracle.py (whose history reading,
fault windows and main phase it uses; it imports nothing of checkers/ or history/).

The rules, as this file applies them (checkers.metadata states them for the checker):

- Probe ops are client ops (an integer process) with f connect, declare, bind or delete; a
  completion's invocation is its process's invocation still open, when of the same f.
- The section is absent unless a harness event f "metadata-probe" with an object value is
  recorded and the history has a probe op.
- Per fault window (by start, then end, then f) and per node: the completions whose
  invocation's time (else their own) lies in [start, end], counted by type and by f and type;
  their errors (fail and info) with the prefix from the observation's `queue_prefix` followed
  by letters, digits, "_", ".", "@" or "-" read as "<probe queue>" and "<n.n.n>" as "<pid>",
  grouped by (type, text), counted, ordered by count descending, then type, then text, the
  first 5 listed (with the reply code, three digits and a space at the head of a fail's text)
  and the number of other texts. Completions in no window: `outside_faults`, the same way.
- H is the end of the window that ends last (ties: the later start); B the bound; M the main
  phase's end. Not applicable without windows or with one the history's end closed. Per node:
  totals by type; first_served = the first ok declare completion at or after H,
  last_served_before = the last before H; probes_after = invocations at or after H and at or
  before M; refused = fail or info completions; refused_after (count, last) at or after H;
  refused_past_bound = the first refused at or after H + B. Served when first_served - H <=
  B; else served-late / not-served (false) when refused_past_bound exists and precedes
  first_served (or there is none); else unknown. Valid: false if a node is false, true if
  every node is served, else unknown.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.checkers.oracle import client_of, main_phase, ms, read, read_ops, windows

PROBES = ("connect", "declare", "bind", "delete")
TYPES = ("ok", "fail", "info")


def _observed(harness: list[dict[str, Any]]) -> dict[str, Any] | None:
    for e in harness:
        if e["f"] == "metadata-probe" and isinstance(e.get("value"), dict):
            return e["value"]
    return None


def _completions(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    open_: dict[int, dict[str, Any]] = {}
    out = []
    for op in ops:
        p = client_of(op["process"])
        if p is None or op["f"] not in PROBES:
            continue
        if op["type"] == "invoke":
            open_[p] = op
            continue
        inv = open_.pop(p, None)
        out.append({**op, "at": inv["time"] if inv is not None and inv["f"] == op["f"]
                    else op["time"]})
    return out


def _group(comps: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    out = []
    for node in sorted({c.get("node") for c in comps}, key=lambda n: (n is None, n or "")):
        mine = [c for c in comps if c.get("node") == node]
        ops: dict[str, dict[str, int]] = {}
        errors: dict[tuple[str, str], int] = {}
        for c in mine:
            ops.setdefault(c["f"], {t: 0 for t in TYPES})[c["type"]] += 1
            if c["type"] != "ok":
                text = re.sub(re.escape(prefix) + r"[A-Za-z0-9_.@-]+", "<probe queue>",
                              c.get("error") or "")
                text = re.sub(r"<[0-9]+\.[0-9]+\.[0-9]+>", "<pid>", text)
                errors[(c["type"], text)] = errors.get((c["type"], text), 0) + 1
        ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))

        def code(t: str, e: str) -> int | None:
            m = re.match(r"([0-9]{3}) ", e)
            return int(m.group(1)) if t == "fail" and m else None

        out.append({"node": node, **{t: sum(c["type"] == t for c in mine) for t in TYPES},
                    "ops": {f: ops[f] for f in sorted(ops)},
                    "errors": [{"type": t, "error": e, "reply_code": code(t, e), "count": n}
                               for (t, e), n in ranked[:5]],
                    "more_errors": max(0, len(ranked) - 5)})
    return out


def _rel(t: int | None, heal: int) -> float | None:
    return None if t is None else ms(t - heal)


def judge_metadata(path: Path, bound_ns: int) -> dict[str, Any] | None:
    """Takes a history and the bound (ns). Returns what results.json's metadata section must
    say (the fields this oracle knows), or None when it must be absent."""
    r = read(Path(path))
    ops = read_ops(Path(path))
    observed = _observed(r.harness)
    comps = _completions(ops)
    probes = [op for op in ops if client_of(op["process"]) is not None and op["f"] in PROBES]
    if observed is None or not probes:
        return None
    prefix = observed.get("queue_prefix") or "harness-probe-"
    ws = windows(r)
    per_window = [{"window": i, "start_ms": ms(w["start"]), "end_ms": ms(w["end"]),
                   "nodes": _group([c for c in comps if w["start"] <= c["at"] <= w["end"]],
                                   prefix)} for i, w in enumerate(ws)]
    outside = _group([c for c in comps
                      if not any(w["start"] <= c["at"] <= w["end"] for w in ws)], prefix)
    out: dict[str, Any] = {"windows": per_window, "outside_faults": outside}
    nodes = sorted({op.get("node") for op in probes}, key=lambda n: (n is None, n or ""))
    if not ws or any(w["closed_by"] == "end-of-history" for w in ws):
        out.update(valid="unknown", status="not-applicable",
                   nodes=[{"node": n, **{t: sum(c["type"] == t for c in comps
                                                if c.get("node") == n) for t in TYPES}}
                          for n in nodes])
        return out
    last = max(ws, key=lambda w: (w["end"], w["start"]))
    heal, main_end = last["end"], main_phase(r)[1]
    judged = []
    for n in nodes:
        mine = [c for c in comps if c.get("node") == n]
        served = [c["time"] for c in mine if c["type"] == "ok" and c["f"] == "declare"]
        refused = [c["time"] for c in mine if c["type"] in ("fail", "info")]
        first = min((t for t in served if t >= heal), default=None)
        past = min((t for t in refused if t >= heal + bound_ns), default=None)
        if first is not None and first - heal <= bound_ns:
            status = "served"
        elif past is not None and (first is None or past < first):
            status = "served-late" if first is not None else "not-served"
        else:
            status = "unknown"
        judged.append({
            "node": n, **{t: sum(c["type"] == t for c in mine) for t in TYPES},
            "after_heal": {
                "status": status,
                "valid": {"served": True, "served-late": False, "not-served": False}.get(
                    status, "unknown"),
                "first_served_ms": _rel(first, heal),
                "last_served_before_ms": _rel(max((t for t in served if t < heal),
                                                  default=None), heal),
                "probes_after": sum(1 for op in ops if client_of(op["process"]) is not None
                                    and op["f"] in PROBES and op.get("node") == n
                                    and op["type"] == "invoke" and heal <= op["time"] <= main_end),
                "refused_after": sum(t >= heal for t in refused),
                "last_refused_ms": _rel(max((t for t in refused if t >= heal), default=None),
                                        heal),
                "refused_past_bound_ms": _rel(past, heal)}})
    verdicts = [j["after_heal"]["valid"] for j in judged]
    valid = (False if False in verdicts else
             True if verdicts and all(v is True for v in verdicts) else "unknown")
    status = "served" if valid is True else "not-served" if valid is False else "unknown"
    out.update(valid=valid, status=status,
               last_heal_ms=ms(heal), nodes=judged)
    return out
