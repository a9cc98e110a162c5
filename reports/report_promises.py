"""The newer promises' part of the report, read from results.json: priority, delayed retry,
consumer timeout, metadata after the heal, and the settlement of publishes and staying consumers
across a heal (the liveness section's `settlement`).

One section of the page per results.json section present, each drawn by
templates/report/promises.html.j2 from a `Promise`: its verdict and the
section's own words for why (its reason, its summary, else its counts in a
sentence), its settings, its counts under the names results.json gives them
(judged, not judged by reason, violations by kind), its examples with their
timelines as the checker stored them, and its plot (reports.plots_promises,
reports.plots). One judge: nothing here decides a verdict or counts anything
the checker did not count; a field missing (an older or failed check) shows
as missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reports.html import Note, Para, Table, badge_td, code_td, table, td, th
from reports.page import NA, as_dict, as_number, valid_key

# results.json's section name, the page's heading, and the plot it draws.
PROMISES: tuple[tuple[str, str, str], ...] = (
    ("priority", "Strict priority", "priority.png"),
    ("delayed_retry", "Delayed retry", "retry.png"),
    ("consumer_timeout", "Consumer timeout", "timeout.png"),
    ("metadata", "Metadata after the heal (Khepri minority probe)", "metadata.png"),
    ("settlement", "Settlement after a heal (clients that stay)", ""),
)
# The counts each section shows, in its own names and order (a mapping shows each key).
COUNTS: dict[str, tuple[str, ...]] = {
    "priority": ("delivery_count", "judged_count", "violation_count", "not_judged_count",
                 "not_judged", "unconfirmed_set_aside_count"),
    "delayed_retry": ("returns", "judged", "redelivered", "dead_lettered", "violation_count",
                      "violations", "not_judged"),
    "consumer_timeout": ("broker_cancels", "broker_channel_closes", "held_judged",
                         "redelivered", "dead_lettered", "acked_after_end", "violation_count",
                         "violations", "not_judged"),
    "settlement": ("publishes", "consumers", "stuck_channels", "stuck_consumers"),
}
# What each section says of its run whatever it judged.
SETTINGS: dict[str, tuple[str, ...]] = {
    "priority": ("queue", "line", "levels", "strict", "single_active_consumer",
                 "skew_margin_ms"),
    "delayed_retry": ("settings", "tolerance_ms"),
    "consumer_timeout": ("settings",),
    "metadata": ("probe", "bound_ms", "last_heal_ms", "main_after_heal_ms", "judged"),
    "settlement": ("bound_ms", "consumers_not_judged"),
}
MAX_EXAMPLES = 5


@dataclass(frozen=True)
class Promise:
    """One promise's section as the page shows it: results.json's name (the anchor), heading,
    verdict key, why (one sentence), settings line, counts table (None: none), the examples'
    parts (paragraphs, notes, tables) and its plot's file name."""

    name: str
    heading: str
    key: str
    why: str
    settings: str
    counts: Table | None
    parts: tuple[Any, ...]
    plot: str


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else NA


def _plain(x: Any) -> str:
    """Takes a scalar or a mapping. Returns it as text: booleans as yes/no, mappings as k=v."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, Mapping):
        return ", ".join(f"{k}={_plain(v)}" for k, v in x.items() if v is not None) or NA
    if isinstance(x, list | tuple):
        return ", ".join(_plain(v) for v in x) or NA
    return NA if x is None else str(x)


def settings_line(name: str, s: Mapping[str, Any]) -> str:
    """Takes a section's name and the section. Returns its settings, as results.json names
    them ("" when it has none)."""
    parts = []
    for key in SETTINGS.get(name, ()):
        if key not in s:
            continue
        v = s[key]
        parts.append(_plain(v) if key in ("settings", "probe") else f"{key}={_plain(v)}")
    return "; ".join(p for p in parts if p and p != NA)


def counts_table(name: str, s: Mapping[str, Any]) -> Table | None:
    """Takes a section's name and the section. Returns its counts (results.json's field, the
    number), a mapping's keys as field.key; a row is marked bad when it counts violations
    and is not 0. None when the section has none of them (a check that failed)."""
    rows, classes = [], []
    for key in COUNTS.get(name, ()):
        v = s.get(key)
        items = list(v.items()) if isinstance(v, Mapping) else [(None, v)] if key in s else []
        for sub, n in items:
            field = key if sub is None else f"{key}.{sub}"
            rows.append([td(field), td(_n(n), num=True)])
            bad = ((key in ("violations", "violation_count", "stuck_channels",
                            "stuck_consumers") or sub == "stuck")
                   and isinstance(n, int) and n > 0)
            classes.append("bad" if bad else None)
    return table(["results.json", "count"], rows, num_cols=[1], row_classes=classes) \
        if rows else None


def why_sentence(name: str, s: Mapping[str, Any]) -> str:
    """Takes a section's name and the section. Returns why it says what it says: its error,
    its summary or reason, else its counts in a sentence."""
    if s.get("error"):
        return f"The check failed: {s['error']}"
    for key in ("summary", "reason"):
        if isinstance(s.get(key), str) and s[key]:
            return str(s[key])
    if name == "priority":
        skewed = (s.get("not_judged") or {}).get("within_skew")
        aside = (f" ({_n(skewed)} set aside within the skew margin of "
                 f"{_ms(s.get('skew_margin_ms'))} ms)" if isinstance(skewed, int) and skewed
                 else "")
        return (f"{_n(s.get('violation_count'))} violation(s) among {_n(s.get('judged_count'))} "
                f"deliveries judged of {_n(s.get('delivery_count'))}; "
                f"{_n(s.get('not_judged_count'))} not judged{aside}.")
    if name == "delayed_retry":
        return (f"{_n(s.get('violation_count'))} violation(s) among {_n(s.get('judged'))} "
                f"returns judged of {_n(s.get('returns'))} ({_n(s.get('redelivered'))} back "
                f"redelivered in time, {_n(s.get('dead_lettered'))} dead-lettered).")
    closes = (f" and {_n(s.get('broker_channel_closes'))} channel close(s) (406)"
              if s.get("broker_channel_closes") else "")
    return (f"{_n(s.get('violation_count'))} violation(s) after {_n(s.get('broker_cancels'))} "
            f"broker cancel(s){closes}: {_n(s.get('held_judged'))} held message(s) judged "
            f"({_n(s.get('redelivered'))} back flagged, {_n(s.get('dead_lettered'))} "
            f"dead-lettered){_acked_after_end(s)}.{hand_over_sentence(s.get('hand_over'))}")


def _acked_after_end(s: Mapping[str, Any]) -> str:
    """Takes the consumer-timeout section. Returns the clause on held messages their consumer
    acked after its end (kept checked out by the broker, not returned), or ""."""
    n = s.get("acked_after_end")
    return (f"; {_n(n)} acked by their consumer after its end and never back (not past their "
            f"timeout: kept, not returned)") if n else ""


def hand_over_sentence(h: Any) -> str:
    """Takes the consumer-timeout section's `hand_over` (None on a queue without a single
    active consumer). Returns a sentence on its hand-overs, with a leading space, or ""."""
    if not isinstance(h, Mapping):
        return ""
    if "reason" in h:
        return f" Single active consumer: the hand-over was not judged ({h['reason']})."
    bound = as_dict(h.get("bound"))
    delay = as_dict(h.get("delay_ms"))
    return (f" Single active consumer: {_n(h.get('judged'))} hand-over(s) judged, "
            f"{_n(h.get('handed_over'))} in time (the slowest {_ms(delay.get('max'))} ms after "
            f"the end), {_n(h.get('stalled'))} stalled past the bound "
            f"({_ms(bound.get('bound_ms'))} ms); not judged: {_plain(h.get('not_judged'))}.")


def _ms(x: Any) -> str:
    return f"{x:,.1f}" if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _events_table(events: Sequence[Any], columns: Sequence[tuple[str, str]]) -> Table:
    """Takes a timeline's events (dicts) and (header, key) columns ("ms" and "index" are
    numbers). Returns the timeline as a table."""
    rows = []
    for e in events:
        e = e if isinstance(e, Mapping) else {}
        rows.append([td(_ms(e.get(k)) if k == "ms" else _n(e.get(k)) if k == "index"
                        else _plain(e.get(k)), num=k in ("ms", "index")) for _h, k in columns])
    return table([h for h, _k in columns], rows,
                 num_cols=[i for i, (_h, k) in enumerate(columns) if k in ("ms", "index")])


def priority_examples(s: Mapping[str, Any]) -> list[Any]:
    """Takes the priority section. Returns each example, the violations' and then those set
    aside by the skew margin (`within_skew_examples`): what overtook what, and the timeline
    of both messages (the overtaking one's publish, confirm and first delivery; the
    consumer's settlement before; the delivery overtaken), by history index."""
    out: list[Any] = []
    for ex in list(s.get("examples") or [])[:MAX_EXAMPLES]:
        d, by = ex.get("delivery") or {}, ex.get("overtaken_by") or {}
        before = ("the consumer's previous settlement and before "
                  f"{_plain(d.get('id'))} was published (the two-level rule)"
                  if d.get("published") else "the consumer's previous settlement")
        out.append(Para(f"Consumer {_plain(ex.get('consumer'))} was handed {_plain(d.get('id'))} "
                        f"(level {_plain(d.get('level'))}) while {_plain(by.get('id'))} (level "
                        f"{_plain(by.get('level'))}), confirmed before {before}, was still to "
                        "come:"))
        out.append(_priority_timeline(ex))
    for ex in list(s.get("within_skew_examples") or [])[:MAX_EXAMPLES]:
        d, by = ex.get("delivery") or {}, ex.get("overtaken_by") or {}
        ahead = _gap_ms((ex.get("settled") or {}).get("time_ms"),
                        (by.get("confirmed") or {}).get("time_ms"))
        out.append(Para(f"Set aside, not judged: consumer {_plain(ex.get('consumer'))} was "
                        f"handed {_plain(d.get('id'))} (level {_plain(d.get('level'))}) before "
                        f"{_plain(by.get('id'))} (level {_plain(by.get('level'))}), whose "
                        f"confirm was recorded {_fine_ms(ahead)} ms before the consumer's previous "
                        f"ack, within the skew margin ({_ms(s.get('skew_margin_ms'))} ms):"))
        out.append(_priority_timeline(ex))
    return out


def _fine_ms(x: Any) -> str:
    """Takes a time (ms). Returns it to the hundredth (a recording skew is below a ms)."""
    return f"{x:,.2f}" if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _gap_ms(later: Any, earlier: Any) -> float | None:
    """Takes two times (ms). Returns the first less the second, None unless both are numbers."""
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (later, earlier)):
        return None
    return float(later) - float(earlier)


def _priority_timeline(ex: Mapping[str, Any]) -> Table:
    """Takes a priority example. Returns its timeline's table, by history index."""
    d, by = ex.get("delivery") or {}, ex.get("overtaken_by") or {}
    mine = {"consumer": ex.get("consumer")}
    mine_published = [{"event": "published (overtaken)", "id": d.get("id"),
                       **d["published"]}] if isinstance(d.get("published"), Mapping) else []
    events = [
        *mine_published,
        {"event": "published", "id": by.get("id"), **(by.get("published") or {})},
        {"event": "confirmed", "id": by.get("id"), **(by.get("confirmed") or {})},
        {"event": "consumer's previous ack", **mine, **(ex.get("settled") or {})},
        {"event": "delivered (overtaken)", **mine, **d},
        {"event": "delivered (overtaking)", "id": by.get("id"), **(by.get("delivered") or {})},
    ]
    events = [{**e, "ms": e.get("time_ms")} for e in events]
    events.sort(key=lambda e: e["index"] if isinstance(e.get("index"), int) else 0)
    return _events_table(events, [("index", "index"), ("time (ms)", "ms"),
                                  ("event", "event"), ("message", "id"),
                                  ("node", "node"), ("consumer", "consumer")])


RETRY_COLUMNS = (("index", "index"), ("time (ms)", "ms"), ("op", "f"), ("consumer", "consumer"),
                 ("redelivered", "redelivered"), ("x-delivery-count", "delivery_count"))


def retry_examples(s: Mapping[str, Any]) -> list[Any]:
    """Takes the delayed-retry section. Returns each example: the message, its violation, the
    return's kind (reject, nack, lost with its consumer), index, count and the delay seen from
    its moment, then its timeline (older results name the index `reject_index`)."""
    out: list[Any] = []
    for ex in list(s.get("examples") or [])[:MAX_EXAMPLES]:
        index = ex.get("return_index", ex.get("reject_index"))
        out.append(Para(f"{_plain(ex.get('id'))}: {_plain(ex.get('violation'))} — the "
                        f"{_plain(ex.get('kind') or 'reject')} at index {_n(index)}, count "
                        f"{_plain(ex.get('count'))}, came back after "
                        f"{_ms(ex.get('delay_ms'))} ms:"))
        out.append(_events_table(ex.get("timeline") or [], RETRY_COLUMNS))
    return out


TIMEOUT_COLUMNS = (("index", "index"), ("time (ms)", "ms"), ("op", "f"), ("process", "process"),
                   ("consumer", "consumer"), ("redelivered", "redelivered"))


def timeout_examples(s: Mapping[str, Any]) -> list[Any]:
    """Takes the consumer-timeout section. Returns each example: the message, its violation,
    the broker's cancel, then its timeline when the checker stored one."""
    out: list[Any] = []
    for ex in list(s.get("examples") or [])[:MAX_EXAMPLES]:
        fed = f", delivered at index {_n(ex.get('index'))}" if "index" in ex else ""
        out.append(Para(f"{_plain(ex.get('id'))}: {_plain(ex.get('violation'))} — the broker "
                        f"cancelled consumer {_plain(ex.get('consumer'))} at index "
                        f"{_n(ex.get('cancel_index'))}{fed}:" if ex.get("consumer") else
                        f"{_plain(ex.get('id'))}: {_plain(ex.get('violation'))} — held when the "
                        f"broker cancelled its consumer at index {_n(ex.get('cancel_index'))}:"))
        if ex.get("timeline"):
            out.append(_events_table(ex["timeline"], TIMEOUT_COLUMNS))
        else:
            out.append(Note("results.json stores no timeline for this example."))
    hand_over = as_dict(s.get("hand_over"))
    for ex in list(hand_over.get("stalled_examples") or [])[:MAX_EXAMPLES]:
        out.append(Para(f"Stalled hand-over: the broker ended the active consumer "
                        f"{_plain(ex.get('consumer'))} ({_plain(ex.get('how'))}) holding "
                        f"{_n(ex.get('held'))} message(s), {_n(ex.get('waiting'))} more ready, "
                        "and no other consumer was fed by the deadline:"))
        events = [{"event": "the broker ended the consumer", **ex},
                  {"event": "consumers live then (fed before, not ended)",
                   "consumer": ex.get("live") or NA},
                  *({"event": f"depth sample: {_n(d.get('ready'))} ready", "ms": d.get("ms")}
                    for d in ex.get("depth") or [] if isinstance(d, Mapping)),
                  {"event": "deadline (the liveness bound)", "ms": ex.get("deadline_ms")},
                  {"event": "next delivery to another consumer", **(ex.get("next") or {})}
                  if ex.get("next") else {"event": "no delivery to another consumer"}]
        out.append(_events_table(events, HAND_OVER_COLUMNS))
    return out


HAND_OVER_COLUMNS = (("index", "index"), ("time (ms)", "ms"), ("event", "event"),
                     ("process", "process"), ("consumer", "consumer"))


def metadata_parts(s: Mapping[str, Any]) -> list[Any]:
    """Takes the metadata section. Returns its findings, its nodes after the heal, and what
    the probe met in each fault window, per node (most frequent error first)."""
    out: list[Any] = [Para(str(f.get("statement"))) for f in s.get("findings") or []
                      if isinstance(f, Mapping)]
    rows = []
    for n in s.get("nodes") or []:
        after = as_dict(n.get("after_heal"))
        rows.append([th(n.get("node")), td(_n(n.get("ok")), num=True),
                     td(_n(n.get("fail")), num=True), td(_n(n.get("info")), num=True),
                     badge_td(valid_key(after.get("valid")), _plain(after.get("status"))
                              if after else "not judged"),
                     td(_n(after.get("probes_after")), num=True),
                     td(_n(after.get("refused_after")), num=True),
                     *(td(_ms(after.get(k)), num=True) for k in AFTER_HEAL_MS),
                     td(after.get("reason") or s.get("reason"))])
    if rows:
        out.append(Para("Each node after the last heal (times in ms after it):"))
        out.append(table(["node", "ok", "fail", "info", "after the heal", "probes after",
                          "refused after", "last declare answered before", "first declare "
                          "answered", "last refused", "refused past the bound", "why"], rows,
                         num_cols=[1, 2, 3, 5, 6, 7, 8, 9, 10], wide=True))
    out += _windows_table(s)
    return out


# A node's times after the heal (results.json's after_heal, ms after the last heal), in order.
AFTER_HEAL_MS = ("last_served_before_ms", "first_served_ms", "last_refused_ms",
                 "refused_past_bound_ms")


def _windows_table(s: Mapping[str, Any]) -> list[Any]:
    """Takes the metadata section. Returns the per-window, per-node table of probe outcomes."""
    rows = []
    spans = [(w, f"{_plain(w.get('fault'))} {_plain(w.get('target'))}")
             for w in s.get("windows") or [] if isinstance(w, Mapping)]
    spans.append(({"nodes": s.get("outside_faults") or []}, "outside every fault"))
    for w, label in spans:
        for n in w.get("nodes") or []:
            err = (n.get("errors") or [{}])[0]
            rows.append([td(label), td(_ms(w.get("start_ms")), num=True),
                         td(_ms(w.get("end_ms")), num=True), th(n.get("node")),
                         td(_n(n.get("ok")), num=True), td(_n(n.get("fail")), num=True),
                         td(_n(n.get("info")), num=True),
                         code_td(f"{_n(err.get('count'))} x {err.get('error')}")
                         if err.get("error") else td("-")])
    if not rows:
        return []
    return [Para("What the probe met, per fault window (by its invocation's time) and node:"),
            table(["window", "start (ms)", "end (ms)", "node", "ok", "fail", "info",
                   "most frequent error"], rows, num_cols=[1, 2, 4, 5, 6], wide=True)]


SETTLEMENT_COLUMNS = (("time (ms)", "ms"), ("event", "event"), ("message", "id"),
                      ("completion", "completion"), ("status", "status"))


def _at_ms(e: Mapping[str, Any]) -> float:
    """Takes a timeline event. Returns its time (ms), 0 when it has none."""
    return as_number(e.get("ms")) or 0.0


def settlement_parts(s: Mapping[str, Any]) -> list[Any]:
    """Takes the liveness section's settlement part. Returns its heals and each stuck client's
    statement and timeline as the checker stored them (a publish: the channel's last confirm
    before the heal, the heal, the stuck publish's send and completion, the channel's later
    publishes; a consumer: its last delivery before the heal, the heal, its first after it and
    its end)."""
    heals = [as_dict(h) for h in s.get("heals") or []]
    out: list[Any] = []
    if heals:
        out.append(Para("Heals judged (a fault window's end no other window covers): " + "; ".join(
            f"{_ms(h.get('at_ms'))} ms ({_plain(h.get('fault'))}"
            + (f", next fault at {_ms(h.get('next_fault_ms'))} ms)" if h.get("next_fault_ms")
               is not None else ")") for h in heals) + "."))
    for f in list(s.get("findings") or [])[:MAX_EXAMPLES]:
        f = as_dict(f)
        tl = as_dict(f.get("timeline"))
        out.append(Para(f"{_plain(f.get('statement'))} (queue leader at the heal: "
                        f"{_plain(f.get('leader_at_heal'))})."))
        if f.get("what") == "consumer":
            events = [
                {"event": "last delivery before the heal", "ms": tl.get("last_fed_before_ms")},
                {"event": "heal", "ms": tl.get("heal_ms")},
                {"event": "first delivery after the heal", "ms": tl.get("first_fed_after_ms")},
                {"event": "consumer ended", "ms": tl.get("ended_ms")}]
        else:
            first = as_dict(tl.get("stuck"))
            events = [{"event": "last confirm on the channel before the heal",
                       "ms": tl.get("last_confirm_before_ms")},
                      {"event": "stuck publish sent", "ms": first.get("sent_ms"), **first},
                      {"event": "heal", "ms": tl.get("heal_ms")},
                      {"event": "stuck publish completed", "ms": first.get("completed_ms"),
                       **first}]
            events += [{"event": "later publish sent", "ms": x.get("sent_ms"), **x}
                       for x in (as_dict(y) for y in tl.get("later") or [])]
            events.sort(key=_at_ms)
        out.append(_events_table([e for e in events if e.get("ms") is not None or
                                  str(e["event"]).startswith("first")], SETTLEMENT_COLUMNS))
    return out


EXAMPLES = {"priority": priority_examples, "delayed_retry": retry_examples,
            "consumer_timeout": timeout_examples, "metadata": metadata_parts,
            "settlement": settlement_parts}


def promises_data(results: Any) -> list[Promise]:
    """Takes results.json's content. Returns a Promise for each of its promise sections
    present, in page order ([] for none)."""
    if not isinstance(results, dict):
        return []
    out = []
    for name, heading, plot in PROMISES:
        s = as_dict(results.get("liveness")).get(name) if name == "settlement" \
            else results.get(name)
        if not isinstance(s, dict):
            continue
        parts = tuple(EXAMPLES[name](s)) if not s.get("error") else ()
        if name not in ("metadata", "settlement") and not parts and \
                s.get("valid") is not False:
            parts = (Note("No violation, so no example."),)
        out.append(Promise(name, heading, valid_key(s.get("valid")), why_sentence(name, s),
                           settings_line(name, s), counts_table(name, s), parts, plot))
    return out
