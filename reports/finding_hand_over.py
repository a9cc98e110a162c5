"""A finding's stalled hand-overs: a single active consumer's queue that no other consumer was
fed from within the bound after the broker ended its active consumer.

The consumer-timeout section's `hand_over` part (checkers.timeouts) keeps each
stalled hand-over as a judgement with no message of its own: the broker's end
of the active consumer (history index, time, process, consumer tag, `how`: a
basic.cancel or a channel close 406), how many messages it held and how many
were waiting, the consumers the history shows live then, the deadline (the
liveness bound after the end, or after the heal of a fault in effect then),
the harness's queue depth samples up to it, and the next delivery to another
consumer (None: none in the main phase). `stalled` returns those results.json
keeps (at most MAX_SHOWN) and a note on any left out; `indices` the history
indices whose ops the page shows (the end, the next delivery); `lines` writes
one as Markdown: results.json's facts of it, in words, then its ops from the
history with exact times, with the consumers' ends, the nemesis's and the
harness's phase and placement ops between the end and the later of the
deadline and the next delivery (NEAR_NS either side). Nothing here judges: the
status and every figure are the checker's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from history import Op
from reports import markdown as md
from reports.finding_examples import ops_part
from reports.finding_history import NEAR_NS, Scan, fault_words, with_context
from reports.finding_history import seconds_text as _s
from reports.page import as_dict

MAX_SHOWN = 5
MS = 1_000_000
# results.json's `how` -> what the broker did, in words.
HOW: dict[str, str] = {"cancel": "sent basic.cancel",
                       "channel_close_406": "closed its channel (406 PRECONDITION_FAILED)"}


def _hand_over(results: Any) -> dict[str, Any]:
    return as_dict(as_dict(as_dict(results).get("consumer_timeout")).get("hand_over"))


def stalled(results: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Takes results.json's content. Returns its stalled hand-overs (at most MAX_SHOWN, as the
    checker kept them) and notes on those left out."""
    h = _hand_over(results)
    kept = [x for x in h.get("stalled_examples") or [] if isinstance(x, dict)]
    total = h.get("stalled")
    shown = kept[:MAX_SHOWN]
    more = (total if isinstance(total, int) and not isinstance(total, bool) else len(kept)) \
        - len(shown)
    notes = [f"consumer_timeout: {more} more stalled hand-over(s) than shown here "
             f"(results.json keeps {len(kept)})"] if more > 0 else []
    return shown, notes


def indices(hand_overs: Sequence[Mapping[str, Any]]) -> set[int]:
    """Takes stalled hand-overs. Returns the history indices of their ends and next
    deliveries."""
    out = set()
    for x in hand_overs:
        for i in (x.get("index"), as_dict(x.get("next")).get("index")):
            if isinstance(i, int) and not isinstance(i, bool):
                out.add(i)
    return out


def heading(x: Mapping[str, Any]) -> str:
    """Takes a stalled hand-over. Returns its heading (Markdown)."""
    return (f"Stalled hand-over: the broker ended the active consumer {md.code(x.get('consumer'))}"
            f" at {md.text(_s(x.get('ms')))}, and no other consumer was fed by the deadline")


def facts(x: Mapping[str, Any], results: Any) -> list[tuple[str, str]]:
    """Takes a stalled hand-over and results.json's content. Returns what results.json says of
    it, as (label, text): the end, what was ready, the consumers live then, the deadline and
    the bound, the depth samples, the next delivery to another consumer, the faults from the
    end to the deadline and what the workload does after an end."""
    h = _hand_over(results)
    bound = as_dict(h.get("bound")).get("bound_ms")
    how = str(x.get("how"))
    nxt = as_dict(x.get("next"))
    end_ms, deadline = x.get("ms"), x.get("deadline_ms")
    live = [str(c) for c in x.get("live") or []]
    depth = [as_dict(d) for d in x.get("depth") or []]
    out = [
        ("the end", f"the broker {HOW.get(how, how)} to consumer {x.get('consumer')} (process "
                    f"{x.get('process')}, history index {x.get('index')}) at {_s(end_ms)}"),
        ("ready then", f"{x.get('held')} message(s) it held, {x.get('waiting')} more confirmed "
                       "and not yet delivered"),
        ("consumers live then", ", ".join(live) if live else
         "none the history shows (fed before the end and not ended; a standby never fed has "
         "no op until it ends)"),
        ("deadline", f"{_s(deadline)}: the liveness bound ({_s(bound)}) after the end, or after "
                     "the heal of a fault in effect within it"),
        ("queue depth up to the deadline", "; ".join(
            f"{d.get('ready')} ready at {_s(d.get('ms'))}" for d in depth) or
         "no sample of the harness's"),
        ("next delivery to another consumer",
         f"consumer {nxt.get('consumer')} (process {nxt.get('process')}, history index "
         f"{nxt.get('index')}) at {_s(nxt.get('ms'))}, {_s(x.get('delay_ms'))} after the end"
         if nxt else "none in the main phase"),
        ("faults from the end to the deadline", faults_between(results, end_ms, deadline)),
    ]
    if isinstance(h.get("after_an_end"), str):
        out.append(("after an end", h["after_an_end"]))
    return out


def faults_between(results: Any, start_ms: Any, end_ms: Any) -> str:
    """Takes results.json's content and a span (ms; the end may be None: the start alone).
    Returns the faults in effect at some time within it, with their windows ("partition-one
    on n1 (8.000 s to 9.000 s)"), "none", or "unknown" without the span's start."""
    if not isinstance(start_ms, int | float) or isinstance(start_ms, bool):
        return "unknown"
    stop = end_ms if isinstance(end_ms, int | float) and not isinstance(end_ms, bool) \
        else start_ms
    found = []
    for f in as_dict(results).get("faults") or []:
        f = as_dict(f)
        a, z = f.get("start_ms"), f.get("end_ms")
        if not isinstance(a, int | float) or a > stop or (
                isinstance(z, int | float) and z < start_ms):
            continue
        until = _s(z) if isinstance(z, int | float) else "the end of the run"
        found.append(f"{fault_words(f)} ({_s(a)} to {until})")
    return "; ".join(found) or "none"


def _span(x: Mapping[str, Any]) -> tuple[int, int] | None:
    """Takes a stalled hand-over. Returns the span (ns) its table covers: NEAR_NS before the end
    to NEAR_NS after the later of the deadline and the next delivery; None without its end's
    time."""
    end = x.get("ms")
    if not isinstance(end, int | float) or isinstance(end, bool):
        return None
    later = [v for v in (x.get("deadline_ms"), as_dict(x.get("next")).get("ms"))
             if isinstance(v, int | float) and not isinstance(v, bool)]
    return int(end * MS) - NEAR_NS, int(max([end, *later]) * MS) + NEAR_NS


def ops_of(x: Mapping[str, Any], s: Scan) -> list[Op]:
    """Takes a stalled hand-over and the scan. Returns, in history order, its end and next
    delivery, and within its span (`_span`) every consumer's end, the nemesis's completed ops
    and the harness's phase boundaries and placement samples."""
    own = [s.by_index[i] for i in indices([x]) if i in s.by_index]
    return with_context(own, s, _span(x), s.ends)


def lines(x: Mapping[str, Any], results: Any, s: Scan | None,
          start_unix: float | None) -> list[str]:
    """Takes a stalled hand-over, results.json's content, the history's scan (None: no
    history) and the wall clock at history time 0. Returns its Markdown."""
    out = [f"### {heading(x)}", "", "Kind: `consumer_timeout` (a stalled hand-over).", ""]
    out += [f"- {md.text(k)}: {md.text(v)}" for k, v in facts(x, results)]
    out.append("")
    return out + ops_part(
        s, lambda scan: ops_of(x, scan), start_unix, "hand-over",
        "Its ops from the history: the end, the consumers' ends, the faults and the harness's "
        "samples from 2 s before it to 2 s after the later of the deadline and the next "
        "delivery, and that delivery:")
