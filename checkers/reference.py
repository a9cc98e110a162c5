"""The reference checker: the same definitions as the Spark job, in plain Python, for small histories.

It reads the history once, line by line, validating as it goes (the first
offending line raises HistoryError), and keeps per message id only what the
definitions need. It is the oracle of the tests: the Spark engine must give
the same results field by field. Definitions (Jepsen's total-queue, adapted
to ids that are never reused):

- attempted = ids of publish invocations; acknowledged = publishes `ok`;
  delivered = ids of deliveries (ok consume/drain ops);
- ok = delivered ∩ attempted; lost = acknowledged - delivered;
  unexpected = delivered - attempted;
- duplicated = attempted ids delivered more than once (Jepsen: dequeues -
  attempts - unexpected). The first delivery (lowest index) is the original,
  the others are extras: *redelivered* duplicates have every extra flagged
  redelivered, *unflagged* duplicates have at least one extra without it;
- recovered = delivered ∩ attempted whose publish completed `info` or never
  completed; delivered_failed = delivered ids whose publish was `fail`.

The ordering and perf definitions are in `ordering_facts` and `perf_facts`.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.errors import HistoryError
from checkers.faults import NemesisOp, fault_windows, pairing_problem
from checkers.model import (
    DELIVERY_FS,
    HARNESS,
    LONG_MAX,
    LONG_MIN,
    NEMESIS,
    OP_TYPES,
    PUBLISH,
    as_text,
    client_process,
    consumer_identity,
    nearest_rank,
    parse_message_id,
    sorted_sample,
)
from checkers.options import CheckOptions
from checkers.phases import HarnessEvent, drain_complete, main_phase
from checkers.results import (
    BucketStats,
    Delivery,
    Violation,
    check_safe,
    compose,
    longest_gap,
    ordering_section,
    perf_section,
    queue_section,
)

log = logging.getLogger(__name__)

_INT_FIELDS = ("index", "time", "publisher", "seq")
_REQUIRED = ("index", "time", "type", "process", "f")


@dataclass(slots=True)
class Rec:
    """One parsed op. `process` is an int for clients, else "nemesis" or "harness"."""

    line: int
    index: int
    time: int
    type: str
    process: int | str
    f: str
    value: Any
    node: str | None
    publisher: int | None
    seq: int | None
    consumer: str | None
    redelivered: bool | None
    error: str | None


def _is_long(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and LONG_MIN <= v <= LONG_MAX


def parse_line(text: str, line: int, path: Path | str | None = None) -> Rec | None:
    """Takes one line of a history and its number. Returns the op, or None for a blank line.

    Raises HistoryError for a line that is not a JSON object, has a field of
    the wrong type, misses a required field, or names an unknown op type or
    process, or a publish/delivery without a message id.
    """
    if not text.strip():
        return None

    def bad(msg: str) -> HistoryError:
        return HistoryError(msg, line, path)

    try:
        d = json.loads(text)
    except ValueError as e:
        raise bad(f"not valid JSON: {e}") from None
    if not isinstance(d, dict):
        raise bad("not a JSON object")
    for k in _INT_FIELDS:
        if d.get(k) is not None and not _is_long(d[k]):
            raise bad(f"field {k!r} is not an integer: {d[k]!r}")
    if d.get("redelivered") is not None and not isinstance(d["redelivered"], bool):
        raise bad(f"field 'redelivered' is not a boolean: {d['redelivered']!r}")
    for k in _REQUIRED:
        if d.get(k) is None:
            raise bad(f"missing field {k!r}")
    type_ = as_text(d["type"])
    if type_ not in OP_TYPES:
        raise bad(f"unknown op type {type_!r}")
    raw_process = d["process"]
    cp = client_process(raw_process)
    process: int | str
    if cp is not None:
        process = cp
    elif raw_process in (NEMESIS, HARNESS):
        process = raw_process
    else:
        raise bad(f"unknown process {raw_process!r}")
    f = as_text(d["f"]) or ""
    value = as_text(d.get("value")) if cp is not None else d.get("value")
    if cp is not None and value is None:
        if f == PUBLISH:
            raise bad("publish without a message id (value)")
        if f in DELIVERY_FS and type_ == "ok":
            raise bad("delivery without a message id (value)")
    return Rec(
        line=line, index=d["index"], time=d["time"], type=type_, process=process, f=f,
        value=value, node=as_text(d.get("node")), publisher=d.get("publisher"),
        seq=d.get("seq"), consumer=as_text(d.get("consumer")),
        redelivered=d.get("redelivered"), error=as_text(d.get("error")),
    )


@dataclass(slots=True)
class Message:
    """What the history says about one message id."""

    inv_line: int | None = None
    inv_process: int | None = None
    inv_time: int | None = None
    outcome: str | None = None  # ok | fail | info; None while (or if forever) open
    comp_time: int | None = None
    deliveries: int = 0
    unflagged: int = 0
    first_flagged: bool | None = None


@dataclass
class Scan:
    """Everything the sections need, gathered in one pass over a valid history."""

    messages: dict[str, Message] = field(default_factory=dict)
    deliveries: list[Rec] = field(default_factory=list)
    nemesis: list[NemesisOp] = field(default_factory=list)
    harness: list[HarnessEvent] = field(default_factory=list)
    min_time: int | None = None
    max_time: int | None = None
    ops: int = 0


def _publish(scan: Scan, r: Rec, path: Path | str | None) -> None:
    mid = r.value
    m = scan.messages.get(mid)
    if r.type == "invoke":
        if m is not None and m.inv_line is not None:
            raise HistoryError(f"message id {mid!r} published again (first at line {m.inv_line})",
                               r.line, path)
        if m is None:
            m = scan.messages[mid] = Message()
        m.inv_line, m.inv_time = r.line, r.time
        m.inv_process = r.process if isinstance(r.process, int) else None
        return
    if m is None or m.inv_line is None:
        raise HistoryError(f"publish {r.type} of {mid!r} without its invocation", r.line, path)
    if m.outcome is not None:
        raise HistoryError(f"publish of {mid!r} completed more than once", r.line, path)
    if m.inv_process != r.process:
        raise HistoryError(
            f"publish of {mid!r} invoked by process {m.inv_process} but completed by {r.process}",
            r.line, path)
    m.outcome, m.comp_time = r.type, r.time


def _deliver(scan: Scan, r: Rec) -> None:
    m = scan.messages.get(r.value)
    if m is None:
        m = scan.messages[r.value] = Message()
    m.deliveries += 1
    if r.redelivered is not True:
        m.unflagged += 1
    if m.deliveries == 1:
        m.first_flagged = r.redelivered is True
    scan.deliveries.append(r)


def scan_lines(lines: Iterable[str], path: Path | str | None = None) -> Scan:
    """Takes the lines of a history. Returns the scan; raises HistoryError at the first bad line."""
    scan = Scan()
    nemesis_lines: list[int] = []
    prev: Rec | None = None
    for lineno, text in enumerate(lines, 1):
        r = parse_line(text, lineno, path)
        if r is None:
            continue
        if prev is not None and r.index <= prev.index:
            raise HistoryError(
                f"index {r.index} is not greater than the previous op's index {prev.index} "
                f"(line {prev.line})", lineno, path)
        prev = r
        scan.ops += 1
        scan.min_time = r.time if scan.min_time is None else min(scan.min_time, r.time)
        scan.max_time = r.time if scan.max_time is None else max(scan.max_time, r.time)
        if isinstance(r.process, int):
            if r.f == PUBLISH:
                _publish(scan, r, path)
            elif r.f in DELIVERY_FS and r.type == "ok":
                _deliver(scan, r)
        elif r.process == NEMESIS:
            scan.nemesis.append(NemesisOp(r.line, r.index, r.time, r.type, r.f, r.value,
                                          r.node, r.error))
            nemesis_lines.append(lineno)
            problem = pairing_problem(scan.nemesis)
            if problem is not None:
                raise HistoryError(problem[1], nemesis_lines[problem[0]], path)
        else:
            scan.harness.append(HarnessEvent(r.time, r.f, r.value))
    return scan


def queue_facts(scan: Scan, sample_size: int) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Takes a scan. Returns the queue counts and sorted samples (see the module docstring)."""
    sets: dict[str, list[str]] = {k: [] for k in (
        "lost", "unexpected", "duplicated", "redelivered_duplicated", "unflagged_duplicated",
        "recovered", "delivered_failed")}
    counts = dict.fromkeys(("attempt_count", "acknowledged_count", "ok_count", "fail_count",
                            "info_count", "delivery_count"), 0)
    for mid, m in scan.messages.items():
        attempted = m.inv_line is not None
        delivered = m.deliveries > 0
        counts["delivery_count"] += m.deliveries
        if attempted:
            counts["attempt_count"] += 1
            counts["acknowledged_count"] += m.outcome == "ok"
            counts["fail_count"] += m.outcome == "fail"
            counts["info_count"] += m.outcome in ("info", None)
        if delivered and attempted:
            counts["ok_count"] += 1
        if m.outcome == "ok" and not delivered:
            sets["lost"].append(mid)
        if delivered and not attempted:
            sets["unexpected"].append(mid)
        if attempted and m.deliveries > 1:
            sets["duplicated"].append(mid)
            extra_unflagged = m.unflagged - (0 if m.first_flagged else 1)
            key = "unflagged_duplicated" if extra_unflagged > 0 else "redelivered_duplicated"
            sets[key].append(mid)
        if attempted and delivered and m.outcome in ("info", None):
            sets["recovered"].append(mid)
        if delivered and m.outcome == "fail":
            sets["delivered_failed"].append(mid)
    for k, ids in sets.items():
        counts[f"{k}_count"] = len(ids)
    return counts, {k: sorted_sample(ids, sample_size) for k, ids in sets.items()}


def ordering_facts(scan: Scan, strict: bool, example_size: int, sample_size: int) -> dict[str, Any]:
    """Takes a scan. Returns the ordering section's facts.

    A stream is the deliveries of one publisher's messages (publisher and seq
    from the delivery's fields, else parsed from its id; deliveries with
    neither are not checked) to one consumer, a consumer being a process and a
    consumer tag. Ordered by history index, each delivery of a stream must have
    a seq greater than the delivery before it in that stream; a pair that does
    not is a violation. By default redelivered deliveries are left out of the
    streams (a requeued message legitimately comes back late). Strict mode
    keeps them: every delivery, flagged or not, must carry a greater seq than
    the previous delivery of that publisher to that consumer (FIFO per
    consumer and publisher, as a single active consumer with prefetch 1 sees).
    """
    last: dict[tuple[int, str, int], Delivery] = {}
    checked = violations = 0
    affected: set[tuple[int, str]] = set()
    examples: list[Violation] = []
    for r in scan.deliveries:
        if not strict and r.redelivered is True:
            continue
        parsed = parse_message_id(r.value)
        pub = r.publisher if r.publisher is not None else parsed[0] if parsed else None
        seq = r.seq if r.seq is not None else parsed[1] if parsed else None
        if pub is None or seq is None or not isinstance(r.process, int):
            continue
        checked += 1
        here = Delivery(r.value, seq, r.index, r.time, r.redelivered is True)
        key = (r.process, r.consumer or "", pub)
        prev = last.get(key)
        if prev is not None and seq <= prev.seq:
            violations += 1
            affected.add((r.process, r.consumer or ""))
            if len(examples) < example_size:
                examples.append(Violation(consumer_identity(r.process, r.consumer), pub, prev, here))
        last[key] = here
    return {
        "deliveries_checked": checked,
        "violation_count": violations,
        "consumers_affected_count": len(affected),
        "consumers_affected": [consumer_identity(p, c) for p, c in sorted(affected)][:sample_size],
        "examples": examples,
    }


def _stats(pubs: Iterable[Message]) -> BucketStats:
    invoked = ok = fail = info = 0
    lat: list[int] = []
    for m in pubs:
        invoked += 1
        if m.outcome == "ok" and m.comp_time is not None and m.inv_time is not None:
            ok += 1
            lat.append(m.comp_time - m.inv_time)
        elif m.outcome == "fail":
            fail += 1
        else:
            info += 1
    if not lat:
        return BucketStats(invoked, ok, fail, info)
    lat.sort()
    return BucketStats(invoked, ok, fail, info, nearest_rank(lat, 0.5), nearest_rank(lat, 0.95),
                       nearest_rank(lat, 0.99), lat[-1])


def perf_facts(scan: Scan) -> dict[str, Any]:
    """Takes a scan. Returns the perf section.

    Publishes are assigned to a fault window by their invoke time (window
    [start, end)); "healthy" are those in no window. Latency is invoke to
    confirm of `ok` publishes. A window's recovery is the time from its end to
    the first confirm (ok completion) at or after it. The longest stretch
    without a confirm is taken over the main phase, its edges included.
    """
    pubs = [m for m in scan.messages.values() if m.inv_time is not None]
    windows = fault_windows(scan.nemesis, scan.max_time or 0)
    confirms = sorted(m.comp_time for m in pubs if m.outcome == "ok" and m.comp_time is not None)
    stats, firsts = [], []
    in_any: set[int] = set()
    for w in windows:
        members = [m for m in pubs if m.inv_time is not None and w.start <= m.inv_time < w.end]
        in_any.update(id(m) for m in members)
        stats.append(_stats(members))
        i = bisect.bisect_left(confirms, w.end)
        firsts.append(confirms[i] if i < len(confirms) else None)
    healthy = _stats(m for m in pubs if id(m) not in in_any)
    start, end = main_phase(scan.harness, scan.min_time or 0, scan.max_time or 0)
    return perf_section((start, end), _stats(pubs), healthy, windows, stats, firsts,
                        longest_gap(confirms, start, end))


def check_scan(scan: Scan, options: CheckOptions) -> dict[str, Any]:
    """Takes a scan and the options. Returns the full results dict."""

    def queue() -> dict[str, Any]:
        counts, samples = queue_facts(scan, options.sample_size)
        return queue_section(counts, samples, drain_complete(scan.harness), options)

    def ordering() -> dict[str, Any]:
        return ordering_section(options.strict_order, **ordering_facts(
            scan, options.strict_order, options.example_size, options.sample_size))

    return compose({
        "queue": check_safe("queue", queue),
        "ordering": check_safe("ordering", ordering),
        "perf": check_safe("perf", lambda: perf_facts(scan)),
    })


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        yield from fh


def check_file(path: Path, options: CheckOptions | None = None) -> dict[str, Any]:
    """Takes a history.jsonl path and options. Returns the results dict; raises HistoryError."""
    options = options or CheckOptions(engine="reference")
    log.info("reference check of %s", path)
    scan = scan_lines(_lines(Path(path)), path)
    log.info("scanned %d ops, %d message ids", scan.ops, len(scan.messages))
    return check_scan(scan, options)


def check_history_lines(lines: Iterable[str], options: CheckOptions | None = None) -> dict[str, Any]:
    """Takes history lines (e.g. a literal test history). Returns the results dict."""
    return check_scan(scan_lines(lines), options or CheckOptions(engine="reference"))


