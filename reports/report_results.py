"""The judgement part of the report, read from results.json: verdict, counts, anomalies.

`verdict_sentence` says in one sentence why a run is valid, valid but weak
(checkers.verdict: its faults tested nothing), invalid or unknown (the
anomalies found, the strength section's "reason", the queue section's
"reason", the run section's "problems", a checker's error). `counts_data` is
a readable table of the queue and ordering counts, `anomalies_data` one block
per anomaly class present, with what it means (the checker's own
`explanations` when results.json carries them, else the definitions below,
shared/DESIGN.md's words), then, when results.json groups the anomalies into
`incidents` (reports.report_strength), each incident once; older results show
each class's example ids and per-message `details` instead. They are plain
data; `counts_section` and `anomalies_section` draw them
(templates/report/counts.html.j2, anomalies.html.j2), as the page does.
Everything degrades to a note when a field is missing, so results of older or
newer checkers render.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checkers.verdict import is_weak
from reports.html import (
    Cell,
    Codes,
    Note,
    Table,
    badge_td,
    link_td,
    render_template,
    table,
    td,
    th,
)
from reports.page import NA, as_dict, count, strength_of, valid_key
from reports.report_excerpts import Excerpt, LogLink, linked_details
from reports.report_loss import loss_parts
from reports.report_strength import Incident, incidents_by_class, incidents_data, incidents_of

log = logging.getLogger(__name__)

MAX_IDS = 20
COUNT_PREFIX = re.compile(r"^\d[\d,]* messages?\. ")
MAX_DETAIL_ROWS = 20
MAX_DETAIL_COLUMNS = 8
# Sections with a place of their own on the page; any other is listed under "other checks".
# The newer promises' sections, each with a part of its own (reports.report_promises).
PROMISE_SECTIONS = ("priority", "delayed_retry", "consumer_timeout", "metadata")
KNOWN_SECTIONS = ("queue", "ordering", "perf", "run", *PROMISE_SECTIONS)
# Sections that inform and judge nothing (no "valid"): never a check's badge or verdict.
INFO_SECTIONS = ("faults", "strength", "incidents", "versions", "fates", "health")
# The per-message details column that repeats the same excerpt for every message of a stretch:
# an incident tells it once.
DETAIL_LOG_COLUMN = "broker log"
# An anomaly class's other names in an incident's counts.
INCIDENT_NAMES: dict[str, tuple[str, ...]] = {"ordering": ("ordering", "reordered")}


@dataclass(frozen=True)
class AnomalyKind:
    """One class of finding: its results.json names, how to count it in words, what it means,
    and whether it counts against the run by default (`allowed` ones are shown apart)."""

    name: str
    one: str
    many: str
    explanation: str
    allowed: bool = False
    # A class whose messages are counted in another one too (said once in the verdict).
    part_of: str | None = None

    def phrase(self, n: int) -> str:
        """Takes a count. Returns e.g. "2 confirmed messages lost"."""
        return f"{n:,} {self.one if n == 1 else self.many}"


ANOMALY_KINDS: dict[str, AnomalyKind] = {
    a.name: a
    for a in (
        AnomalyKind(
            "lost", "confirmed message lost", "confirmed messages lost",
            "The broker confirmed these publishes (basic.ack), yet neither a consumer nor the "
            "drain after healing received them, although the drain read every node until the "
            "queue was proven empty.",
        ),
        AnomalyKind(
            "lost_unacked", "lost message delivered but never acked",
            "lost messages delivered but never acked",
            "Confirmed and delivered, but no delivery was acknowledged and the message never "
            "came back, although a delivery not acked is requeued when its channel closes. "
            "Counted in lost too.",
            part_of="lost",
        ),
        AnomalyKind(
            "unexpected", "delivery of a message never published",
            "deliveries of messages never published",
            "Delivered, but no publish of that id was ever attempted: a corrupted or foreign "
            "message.",
        ),
        AnomalyKind(
            "unflagged_duplicated", "message delivered twice without the redelivered flag",
            "messages delivered more than once without the redelivered flag",
            "Delivered and acked more than once, and a later delivery did not carry the AMQP "
            "redelivered flag: the consumer had no way to know it had seen the message before. "
            "At-least-once delivery does not allow this.",
        ),
        AnomalyKind(
            "unflagged_redelivered", "message delivered again without the redelivered flag",
            "messages delivered again without the redelivered flag",
            "Delivered more than once, and a delivery more than 1 s after the first did not "
            "carry the AMQP redelivered flag, whether or not the first was acked: the broker "
            "presented as new a message it had already handed out. Reported; it counts against "
            "the run when its check says so (--unflagged-redeliveries-invalid).",
        ),
        AnomalyKind(
            "unflagged_after_ack", "message delivered unflagged after an acked redelivery",
            "messages delivered unflagged after an acked redelivery",
            "A delivery flagged redelivered was acknowledged, and later the same message was "
            "delivered again without the flag, presented as new. Counted in the unflagged "
            "duplicates too.",
            part_of="unflagged_duplicated",
        ),
        AnomalyKind(
            "redelivered_duplicated", "message delivered again with the redelivered flag",
            "messages delivered again with the redelivered flag",
            "Delivered more than once, each later delivery flagged as redelivered, as happens "
            "when an ack is lost with its connection: allowed under at-least-once delivery "
            "unless the test counts flagged duplicates against the run.",
            allowed=True,
        ),
        AnomalyKind(
            "delivered_failed", "message delivered although its publish failed",
            "messages delivered although their publish failed",
            "The broker refused these publishes (basic.nack, or a return of an unroutable "
            "message) and the client recorded them as failed, yet they were delivered. "
            "Reported, not held against the queue: a nack refuses responsibility, it does not "
            "say the message is absent.",
            allowed=True,
        ),
        AnomalyKind(
            "recovered", "message of unknown publish outcome delivered",
            "messages of unknown publish outcome delivered",
            "The publish timed out or lost its connection before a confirm, so its outcome was "
            "unknown; the message was delivered all the same. Not an anomaly: the broker kept "
            "what the client could not confirm.",
            allowed=True,
        ),
        AnomalyKind(
            "ordering", "delivery out of publish order", "deliveries out of publish order",
            "A consumer received one publisher's messages in an order other than the one they "
            "were published in (redeliveries excepted, unless the test asks for strict order; "
            "when messages carry priorities, those of one priority: a higher one may go first).",
        ),
    )
}

# Lost messages of a run whose drain did not complete: not proven lost (the verdict is unknown).
UNPROVEN_LOST = AnomalyKind(
    "lost", "confirmed message not read back (not proven lost)",
    "confirmed messages not read back (not proven lost)",
    "Confirmed, but not delivered by the end of the run. The drain did not complete, so these "
    "may still be in the queue: they cannot be called lost, and the verdict is unknown.",
    allowed=True,
)

# Counts of the queue section, in reading order: key -> (label, meaning).
QUEUE_COUNTS: tuple[tuple[str, str, str], ...] = (
    ("attempt_count", "publishes attempted", "publish operations invoked"),
    ("acknowledged_count", "confirmed", "publishes the broker confirmed (basic.ack)"),
    ("fail_count", "failed", "publishes the broker refused (nack or return)"),
    ("info_count", "outcome unknown", "confirm timed out or the connection was lost"),
    ("delivery_count", "deliveries", "consume and drain deliveries"),
    ("acked_delivery_count", "  acked", "deliveries whose acknowledgement was recorded"),
    ("ok_count", "confirmed and delivered", "confirmed publishes that reached a consumer"),
    ("lost_count", "lost", "confirmed, never delivered (anomaly)"),
    ("lost_unacked_count", "  delivered but never acked",
     "lost messages whose deliveries were never acknowledged (anomaly)"),
    ("unexpected_count", "unexpected", "delivered, never published (anomaly)"),
    ("duplicated_count", "duplicated", "delivered more than once"),
    ("redelivered_duplicated_count", "  with redelivered flag",
     "duplicates flagged as redelivered (allowed)"),
    ("unflagged_duplicated_count", "  without redelivered flag",
     "duplicates with no redelivered flag (anomaly)"),
    ("unflagged_after_ack_count", "  unflagged after an acked redelivery",
     "unflagged duplicates delivered after a flagged delivery was acked (anomaly)"),
    ("unflagged_redelivered_count", "delivered again unflagged",
     "delivered again without the redelivered flag, acked before or not"),
    ("recovered_count", "recovered", "publish outcome unknown, delivered anyway"),
    ("delivered_failed_count", "delivered after a nack", "publish refused (nack or return), delivered anyway: reported, not an anomaly"),
    ("dead_lettered_count", "dead-lettered", "read back from the harness's dead-letter queue"),
    ("dropped_by_design_count", "  dropped by design", "dead-lettered by the queue's limits "
     "(max length, delivery limit), never delivered: not an anomaly, not lost"),
    ("dead_lettered_delivered_count", "  also delivered", "dead-lettered, but delivered and "
     "acked too: counted as delivered"),
)
ORDERING_COUNTS: tuple[tuple[str, str, str], ...] = (
    ("deliveries_checked", "deliveries checked for order", "non-redelivered deliveries compared"),
    ("violation_count", "out of order", "a publisher's messages (of one priority, when they "
     "carry priorities) seen out of publish order (anomaly)"),
    ("near_boundary_count", "  out of order near a phase boundary",
     "violations within a second of a phase's start or end, where the harness starts and "
     "stops its clients: suspect, look at the harness's own part first"),
    ("consumers_affected_count", "consumers affected", "consumers that saw a violation"),
    ("flagged_violation_count", "redelivered out of order",
     "a requeued message came back after later ones (allowed)"),
    ("unconfirmed_reorder_count", "reordered, publish unconfirmed",
     "behind a message whose publish was never confirmed, so it may have been enqueued later "
     "(allowed)"),
    ("held_reorder_count", "reordered, held by a cancelled consumer",
     "a redelivered message came back after later ones given to the next consumer while the "
     "consumer the harness cancelled still held it, until its channel closed (the harness's "
     "own doing, allowed)"),
)
# What the lost rows mean when the drain did not complete: not proven lost, so not red.
UNPROVEN_WHY = {
    "lost_count": "confirmed, not read back: the drain did not complete, so not proven lost",
    "lost_unacked_count": "of those, delivered but never acked: not proven lost either",
}
# On a log every consumer reads whole (a stream: the queue section's `log_reads`), what its
# duplicate rows mean instead: each consumer reads every message, by design.
LOG_DUPLICATES = frozenset({"duplicated_count", "redelivered_duplicated_count",
                            "unflagged_duplicated_count", "unflagged_after_ack_count"})
LOG_WHY = ("read by more than one consumer: each reads the log whole from its first offset, by "
           "design (not an anomaly)")
LOG_READS: tuple[tuple[str, str, str], ...] = (
    ("subscriptions", "subscriptions", "consumers (process and consumer tag) that read the log"),
    ("repeated_in_subscription_count", "read again in one subscription",
     "a message one consumer read more than once: reported (streams promise at-least-once)"),
)
LOG_READ_KEYS = frozenset(k for k, _l, _m in LOG_READS)
# Counts that make a row red when non-zero.
BAD_COUNTS = frozenset(
    {"lost_count", "lost_unacked_count", "unexpected_count", "unflagged_duplicated_count",
     "unflagged_after_ack_count", "violation_count"}
)


def _section(results: Any, name: str) -> dict[str, Any]:
    s = results.get(name) if isinstance(results, dict) else None
    return s if isinstance(s, dict) else {}


def _int(x: Any) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) else 0


def lost_unproven(queue: dict[str, Any]) -> bool:
    """Takes the queue section. Returns whether its lost messages are unproven (drain incomplete)."""
    return queue.get("drain_complete") is False and _int(queue.get("lost_count")) > 0


def findings(results: Any) -> list[tuple[AnomalyKind, int]]:
    """Takes results.json's content. Returns the anomaly classes that count against the run, with
    their counts: the queue section's "anomalies" (else every non-zero anomaly count) and, when
    the ordering section is invalid, its violations. Lost messages are left out when the drain
    did not complete: they are not proven lost."""
    queue = _section(results, "queue")
    names = queue.get("anomalies")
    if not isinstance(names, list):
        names = [k for k, a in ANOMALY_KINDS.items()
                 if not a.allowed and k != "ordering" and _int(queue.get(f"{k}_count"))]
    out: list[tuple[AnomalyKind, int]] = []
    for name in names:
        if name in ("lost", "lost_unacked") and lost_unproven(queue):
            continue
        words = str(name).replace("_", " ")
        kind = ANOMALY_KINDS.get(str(name)) or AnomalyKind(str(name), words, words, "")
        n = _int(queue.get(f"{name}_count")) or len(queue.get(str(name)) or [])
        out.append((kind, n))
    ordering = _section(results, "ordering")
    if ordering.get("valid") is False:
        out.append((ANOMALY_KINDS["ordering"], _int(ordering.get("violation_count"))))
    return out


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def verdict_sentence(results: Any) -> str:
    """Takes results.json's content (None when absent). Returns one sentence saying why the run
    is valid, invalid or unknown."""
    if results is None:
        return ("Not checked: there is no results.json (the run may still be going, or it ended "
                "before its check).")
    if not isinstance(results, dict):
        return "Not checked: results.json is not a JSON object."
    return _SENTENCES[valid_key(results.get("valid"))](results)


def _invalid_sentence(results: dict[str, Any]) -> str:
    """Takes an invalid run's results. Returns "Invalid: " and what was found."""
    parts = [kind.phrase(n) for kind, n in findings(results) if kind.part_of is None]
    parts += [f"the {name} check failed" for name, s in results.items()
              if isinstance(s, dict) and s.get("valid") is False
              and name not in ("queue", "ordering")]
    return "Invalid: " + (_join(parts) or "a checker found an anomaly") + "."


def _unknown_sentence(results: dict[str, Any]) -> str:
    """Takes the results of a run with no verdict. Returns "Unknown: " and why, each reason
    once."""
    return "Unknown: " + "; ".join(dict.fromkeys(_unknown_reasons(results))) + "."


def _unknown_reasons(results: dict[str, Any]) -> list[str]:
    """Takes the results of a run with no verdict. Returns why, first found first: the queue's
    reason, the run's problems not said already, failed checkers, a failed check; else the
    run's reason; else the checkers that gave no verdict."""
    queue = _section(results, "queue")
    reasons: list[str] = []
    if queue.get("reason"):
        reasons.append(str(queue["reason"]))
    for p in _section(results, "run").get("problems") or []:
        if str(p).lower() not in " ".join(reasons).lower():  # said already, in other words
            reasons.append(str(p))
    for name, s in results.items():
        if isinstance(s, dict) and s.get("error") and name not in INFO_SECTIONS:
            reasons.append(f"the {name} checker failed ({s['error']})")
    if isinstance(results.get("error"), str):
        reasons.append(f"the check failed ({results['error']})")
    if not reasons and _section(results, "run").get("reason"):
        reasons.append(str(_section(results, "run")["reason"]))
    if not reasons:
        unknown = [n for n, s in results.items()
                   if isinstance(s, dict) and n not in INFO_SECTIONS
                   and valid_key(s.get("valid")) == "unknown"]
        reasons.append("no verdict from " + (", ".join(unknown) or "the checkers"))
    return reasons


def _valid_sentence(results: dict[str, Any]) -> str:
    """Takes a valid run's results. Returns "Valid: " with how many confirmed messages were
    delivered and the allowed anomalies, or "Valid but weak: " and why for a weak run."""
    queue = _section(results, "queue")
    confirmed = queue.get("acknowledged_count")
    allowed = []
    for name in ("redelivered_duplicated", "recovered"):
        n = _int(queue.get(f"{name}_count"))
        if n:
            allowed.append(ANOMALY_KINDS[name].phrase(n))
    if is_weak(results):
        strength = strength_of(results)
        reason = (strength.reason if strength else "").rstrip(". ") or "its faults tested nothing"
        found = (f" (all {count(confirmed)} confirmed messages were delivered)"
                 if isinstance(confirmed, int) else "")
        return (f"Valid but weak: {reason}. No anomaly was found{found}, but a run whose faults "
                "tested nothing is not a pass.")
    head = (f"Valid: all {count(confirmed)} confirmed messages were delivered"
            if isinstance(confirmed, int) else "Valid: every checker passed")
    tail = f" (allowed: {_join(allowed)})" if allowed else ""
    return f"{head}, with no loss, unexpected message, unflagged duplicate or reordering{tail}."


# The sentence for each verdict (`valid_key`).
_SENTENCES: dict[str, Callable[[dict[str, Any]], str]] = {
    "false": _invalid_sentence,
    "unknown": _unknown_sentence,
    "true": _valid_sentence,
}


@dataclass(frozen=True)
class Counts:
    """The Counts section as data: whether there are results, the table of counts, why
    publishes failed ("" for none), whether the history records no acks, and the perf
    checker's summary ("" for none)."""

    checked: bool
    table: Table | None = None
    fail_reasons: str = ""
    no_acks: bool = False
    perf: str = ""


def counts_data(results: Any) -> Counts:
    """Takes results.json's content. Returns the Counts section: one row per count, with what it
    means; a count the checker did not report reads "n/a"."""
    if not isinstance(results, dict):
        return Counts(False)
    rows: list[list[Cell]] = []
    classes: list[str | None] = []
    for name, spec in (("queue", QUEUE_COUNTS), ("ordering", ORDERING_COUNTS)):
        section = _section(results, name)
        rows.append([th(name, colspan=3)])
        classes.append("group")
        if not section or section.get("error"):
            why = (f"the {name} checker failed: {section['error']}" if section
                   else f"no {name} section in results.json")
            rows.append([td("counts"), td(NA, num=True), td(why, cls="meaning")])
            classes.append(None)
            continue
        known = {k for k, _l, _m in spec}
        extra = [(k, k.removesuffix("_count").replace("_", " "), "reported by the checker")
                 for k, v in section.items()
                 if k.endswith("_count") and k not in known and isinstance(v, int)]
        log = _section(section, "log_reads") if name == "queue" else {}
        for k, label, meaning in (*spec, *extra, *(LOG_READS if log else ())):
            v = (log if k in LOG_READ_KEYS else section).get(k)
            shown = count(v) if v is not None else NA
            why = meaning if v is not None else f"{meaning}; not reported by this checker"
            bad = k in BAD_COUNTS and _int(v) > 0
            if log and k in LOG_DUPLICATES:  # a log's design, not an anomaly
                why, bad = LOG_WHY, False
            elif k in UNPROVEN_WHY and lost_unproven(section):
                shown, why, bad = f"({shown})", UNPROVEN_WHY[k], False
            rows.append([td(label.strip(), cls="sub-row" if label.startswith(" ") else None),
                         td(shown, num=True), td(why, cls="meaning")])
            classes.append("bad" if bad else None)
    queue = _section(results, "queue")
    reasons = queue.get("fail_reasons")
    perf = _section(results, "perf")
    return Counts(
        checked=True,
        table=table(["what", "count", "meaning"], rows, row_classes=classes, num_cols=[1]),
        fail_reasons=("; ".join(f"{why_} ({count(n)})" for why_, n in reasons.items())
                      if isinstance(reasons, dict) and reasons else ""),
        no_acks=queue.get("acks_recorded") is False,
        perf=_perf_summary(perf) if perf else "",
    )


def counts_section(results: Any) -> str:
    """Takes results.json's content. Returns the Counts section's HTML
    (templates/report/counts.html.j2 with `counts_data`)."""
    return render_template("report/counts.html.j2", counts=counts_data(results))


def _share(x: Any) -> str:
    return f"{100 * x:.1f} %" if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _perf_summary(perf: dict[str, Any]) -> str:
    overall = as_dict(perf.get("overall"))
    gap = perf.get("longest_without_confirm")
    text = [f"Publishes confirmed over the main phase: {_share(overall.get('ok_share'))}."]
    if isinstance(gap, dict) and isinstance(gap.get("ms"), int | float):
        text.append(
            f" Longest stretch without a confirm: {gap['ms'] / 1000:.3f} s "
            f"(from {_ms_as_s(gap.get('from_ms'))} to {_ms_as_s(gap.get('to_ms'))} s)."
        )
    return "".join(text)


def _ms_as_s(x: Any) -> str:
    return f"{x / 1000:.3f}" if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _ids(ids: Any, total: int | None) -> Note | Codes:
    if not isinstance(ids, list) or not ids:
        return Note("No example ids in results.json.")
    shown = ids[:MAX_IDS]
    more = max(len(ids), total or 0) - len(shown)
    return Codes("Examples", tuple(_short(x) for x in shown), more)


def _short(x: Any) -> str:
    if isinstance(x, dict):
        return ", ".join(f"{k} {_short(v)}" for k, v in list(x.items())[:6])
    if isinstance(x, list):
        return ", ".join(_short(v) for v in x[:10])
    return str(x)


def _details(details: Any) -> Codes | Table | None:
    """Shows per-anomaly details of unknown shape: a list of objects, a map id -> object, or a
    list of scalars."""
    if isinstance(details, dict):
        details = [{"id": k, **(v if isinstance(v, dict) else {"detail": v})}
                   for k, v in details.items()]
    if not isinstance(details, list) or not details:
        return None
    if not all(isinstance(d, dict) for d in details):
        return Codes("Details", tuple(_short(d) for d in details[:MAX_DETAIL_ROWS]))
    columns: list[str] = []
    for d in details[:MAX_DETAIL_ROWS]:
        columns += [str(k) for k in d if str(k) not in columns]
    columns = columns[:MAX_DETAIL_COLUMNS]
    rows = [[_detail_cell(d.get(c)) for c in columns] for d in details[:MAX_DETAIL_ROWS]]
    return table([c.replace("_", " ") for c in columns], rows, len(details))


def _detail_cell(x: Any) -> Cell:
    if isinstance(x, LogLink):  # its broker log, shown once elsewhere on the page
        return link_td(f"#{x.anchor}", x.label)
    return td(_short(x) if x not in (None, "", [], {}) else "-")


def _ordering_examples(examples: Any) -> Note | Table:
    if not isinstance(examples, list) or not examples:
        return Note("No examples in results.json.")
    rows = []
    for x in examples[:MAX_DETAIL_ROWS]:
        if not isinstance(x, dict):
            continue
        earlier = as_dict(x.get("earlier"))
        later = as_dict(x.get("later"))
        rows.append([td(x.get("consumer")), td(x.get("publisher")),
                     td(_delivery(earlier)), td(_delivery(later))])
    return table(["consumer", "publisher", "delivered first", "delivered after it"], rows,
                 len(examples))


def _delivery(d: dict[str, Any]) -> str:
    if not d:
        return NA
    t = _ms_as_s(d.get("time_ms"))
    flag = ", redelivered" if d.get("redelivered") else ""
    return f"{d.get('id', NA)} (seq {d.get('seq', NA)}, at {t} s{flag})"


def _explanation(results: dict[str, Any], kind: AnomalyKind) -> str:
    for section in ("queue", kind.name):
        expl = _section(results, section).get("explanations")
        if isinstance(expl, dict) and expl.get(kind.name):
            # The heading says the count already: drop a leading "2 messages. ".
            return COUNT_PREFIX.sub("", str(expl[kind.name]))
    expl = _section(results, kind.name).get("explanation")
    return str(expl) if expl else kind.explanation


def _class_details(queue: dict[str, Any], name: str) -> Any:
    details = queue.get("details")
    detail = details.get(name) if isinstance(details, dict) else None
    return detail if detail is not None else queue.get(f"{name}_details")


def _without_log(details: Any) -> Any:
    """Takes per-message details. Returns them without the broker-log column, which an
    incident shows once."""
    if isinstance(details, list):
        return [{k: v for k, v in d.items() if k != DETAIL_LOG_COLUMN}
                if isinstance(d, dict) else d for d in details]
    if isinstance(details, dict):
        return {k: _without_log([v])[0] for k, v in details.items()}
    return details


def _incidents_of_class(results: dict[str, Any], kind: AnomalyKind) -> list[tuple[str, str, int]]:
    """The incidents that hold some of a class's messages: (anchor, label, how many)."""
    if incidents_of(results) is None:
        return []
    by_class = incidents_by_class(results)
    return [x for name in INCIDENT_NAMES.get(kind.name, (kind.name,))
            for x in by_class.get(name, [])]


@dataclass(frozen=True)
class AnomalyBlock:
    """One anomaly class as the page shows it: its block's class, its name (the anchor
    anomaly-<name>), its heading, what it means (None: nothing to say), the incidents that
    hold its messages (anchor, label, how many), and, when no incident tells them, its
    examples and per-message details (Notes, Codes and Tables)."""

    cls: str
    name: str
    heading: str
    explanation: str | None
    incidents: tuple[tuple[str, str, int], ...] = ()
    parts: tuple[Note | Codes | Table, ...] = ()
    excerpts: tuple[Excerpt, ...] = ()  # the broker log its details' rows link to, once
    told_apart: tuple[Note | Table, ...] = ()  # lost: by publisher and confirming node


def _anomaly_block(results: dict[str, Any], kind: AnomalyKind, n: int, allowed: bool,
                   cls: str | None = None) -> AnomalyBlock:
    queue = _section(results, "queue")
    said = _explanation(results, kind)
    told = tuple(_incidents_of_class(results, kind))
    parts: list[Note | Codes | Table | None] = []
    excerpts: tuple[Excerpt, ...] = ()
    if told:
        pass  # its incidents tell the examples and the broker's log once, below
    elif kind.name == "ordering":
        parts.append(_ordering_examples(_section(results, "ordering").get("examples")))
    else:
        parts.append(_ids(queue.get(kind.name), n))
        details, excerpts = linked_details(results, kind.name,
                                           _class_details(queue, kind.name), MAX_DETAIL_ROWS)
        parts.append(_details(details))
    return AnomalyBlock(
        cls=cls or ("anomaly allowed" if allowed else "anomaly"),
        name=kind.name,
        heading=kind.phrase(n),
        explanation=said if kind.explanation or said else None,
        incidents=told,
        parts=tuple(p for p in parts if p is not None),
        excerpts=excerpts,
        told_apart=loss_parts(queue) if kind.name == "lost" else (),
    )


def _stories(results: dict[str, Any],
             kinds: list[AnomalyKind]) -> list[tuple[str, Note | Codes | Table]]:
    """The per-message details of the classes shown (the ordering examples for reordering),
    without the broker-log column, for results that tell their incidents: (heading, what)."""
    queue = _section(results, "queue")
    parts: list[tuple[str, Note | Codes | Table]] = []
    for kind in kinds:
        shown: Note | Codes | Table | None
        if kind.name == "ordering":
            examples = _section(results, "ordering").get("examples")
            shown = _ordering_examples(examples) if examples else None
        else:
            shown = _details(_without_log(_class_details(queue, kind.name)))
        if shown is not None:
            parts.append((kind.many, shown))
    return parts


@dataclass(frozen=True)
class Anomalies:
    """The Anomalies section as data: whether there are results; a block per class that counts
    against the run; which checkers failed to look ("" for none); the block of lost messages
    not proven lost (None: none); whether to say none was found; the blocks of classes seen
    but allowed; the incidents (reports.report_strength); the per-message stories the
    incidents stand for, folded; the promise sections judged false (shown in their own
    parts)."""

    checked: bool
    found: tuple[AnomalyBlock, ...] = ()
    failed: str = ""
    unproven: AnomalyBlock | None = None
    none: bool = False
    seen: tuple[AnomalyBlock, ...] = ()
    incidents: tuple[Incident, ...] = ()
    stories: tuple[tuple[str, Note | Codes | Table], ...] = ()
    promises_false: tuple[str, ...] = ()


def anomalies_data(results: Any) -> Anomalies:
    """Takes results.json's content. Returns the Anomalies section: each class that counts
    against the run, then those seen but allowed (flagged redeliveries, recovered messages)."""
    if not isinstance(results, dict):
        return Anomalies(False)
    found = findings(results)
    queue = _section(results, "queue")
    failed = [name for name in ("queue", "ordering") if _section(results, name).get("error")]
    unproven = (_anomaly_block(results, UNPROVEN_LOST, _int(queue.get("lost_count")),
                               allowed=True, cls="anomaly unproven")
                if lost_unproven(queue) else None)
    names = {k.name for k, _ in found}
    seen = [(ANOMALY_KINDS[k], _int(queue.get(f"{k}_count")))
            for k in ("redelivered_duplicated", "recovered", "delivered_failed")
            if k not in names and _int(queue.get(f"{k}_count"))]
    incidents: list[Incident] = []
    stories: list[tuple[str, Note | Codes | Table]] = []
    if incidents_of(results) is not None:
        allowed = frozenset(k for k, a in ANOMALY_KINDS.items() if a.allowed)
        incidents = incidents_data(results, allowed)
        unproven_kinds = [UNPROVEN_LOST] if unproven is not None else []
        # Only classes told by an incident: any other kept its own view above.
        told = [k for k in [k for k, _ in found] + unproven_kinds + [k for k, _ in seen]
                if _incidents_of_class(results, k)]
        stories = _stories(results, told)
    return Anomalies(
        checked=True,
        found=tuple(_anomaly_block(results, kind, n, allowed=False) for kind, n in found),
        failed=" and ".join(failed),
        unproven=unproven,
        none=unproven is None and not found and not failed,
        seen=tuple(_anomaly_block(results, kind, n, allowed=True) for kind, n in seen),
        incidents=tuple(incidents),
        stories=tuple(stories),
        promises_false=tuple(n for n in PROMISE_SECTIONS if _section(results, n).get("valid")
                             is False),
    )


def anomalies_section(results: Any) -> str:
    """Takes results.json's content. Returns the Anomalies section's HTML
    (templates/report/anomalies.html.j2 with `anomalies_data`)."""
    return render_template("report/anomalies.html.j2", anomalies=anomalies_data(results))


def other_checks_table(results: Any) -> Table | None:
    """Takes results.json's content. Returns a table of sections the page has no place for
    (a new checker's), with their verdict and scalar fields, or None when there are none."""
    if not isinstance(results, dict):
        return None
    rows = []
    for name, s in results.items():
        if name in KNOWN_SECTIONS or name in INFO_SECTIONS or name == "valid":
            continue
        if isinstance(s, dict):
            fields = "; ".join(f"{k}: {_short(v)}" for k, v in s.items()
                               if k not in ("valid", "trace") and v not in (None, "", [], {}))
            rows.append([td(name), badge_td(valid_key(s.get("valid"))), td(fields or "-")])
        else:
            rows.append([td(name), td("-"), td(_short(s))])
    return table(["check", "verdict", "fields"], rows) if rows else None


def other_checks_section(results: Any) -> str:
    """Takes results.json's content. Returns the Other checks section's HTML
    (templates/report/other.html.j2), or "" when there is nothing for it."""
    found = other_checks_table(results)
    return render_template("report/other.html.j2", other=found) if found is not None else ""


def section_badges(results: Any) -> list[tuple[str, str]]:
    """Takes results.json's content. Returns each section that judges (name, verdict key), for
    the banner's second line."""
    if not isinstance(results, dict):
        return []
    return [(name, valid_key(s.get("valid"))) for name, s in results.items()
            if isinstance(s, dict) and name not in INFO_SECTIONS]
