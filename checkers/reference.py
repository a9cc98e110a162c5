"""The reference checker: the same definitions as the Spark job, in plain Python, for small histories.

It reads the history once, line by line, validating as it goes (the first
offending line raises HistoryError), and keeps per message id only what the
definitions need. It is the oracle of the tests: the Spark engine must give
the same results field by field. Definitions (Jepsen's total-queue, adapted
to ids that are never reused, and to consumer acknowledgements):

- an ack acknowledges the latest delivery before it with the same process,
  consumer tag and message id; an ack with no unacknowledged delivery there
  breaks the contract. A delivery is *acked* if an ack acknowledges it; in a
  history with no ack at all every delivery counts as acked, at its own index;
- attempted = ids of publish invocations; acknowledged = publishes `ok`;
  received = ids of deliveries (ok consume/drain ops); delivered = ids with an
  acked delivery;
- ok = delivered ∩ attempted; lost = acknowledged - delivered, and
  lost_unacked = lost ∩ received (delivered, never acked, never back);
  unexpected = received - attempted (a message nobody sent is wrong whether or
  not it was acked);
- duplicated = attempted ids with more than one acked delivery (Jepsen:
  dequeues - attempts - unexpected; a delivery to a consumer that never acked
  it, redelivered elsewhere, is not a second consumption). The first acked
  delivery (lowest index) is the original, the other acked ones are extras:
  *redelivered* duplicates have every extra flagged redelivered, *unflagged*
  duplicates have at least one extra without it;
- unflagged_after_ack = ids with an unflagged delivery (acked or not) after
  the ack of a flagged delivery of the same id;
- recovered = delivered ∩ attempted whose publish completed `info` or never
  completed; delivered_failed = delivered ids whose publish was `fail`
  (reported, not an anomaly: a nack refuses responsibility, it does not say
  the message is absent); fail_reasons = failed publishes by error text.

The ordering definitions are in checkers.ordering, the perf ones in `perf_facts`.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.errors import HistoryError, orphan_ack_message
from checkers.faults import NemesisOp, fault_windows, pairing_problem
from checkers.model import (
    ACK,
    DELIVERY_FS,
    HARNESS,
    LONG_MAX,
    LONG_MIN,
    NEMESIS,
    OP_TYPES,
    PUBLISH,
    as_text,
    client_process,
    nearest_rank,
    sorted_sample,
)
from checkers.options import CheckOptions
from checkers.ordering import ordering_facts
from checkers.phases import HarnessEvent, drain_state, main_phase
from checkers.results import (
    BucketStats,
    check_safe,
    compose,
    longest_gap,
    ordering_section,
    perf_section,
    queue_section,
    top_reasons,
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
        if f == ACK and type_ == "ok":
            raise bad("ack without a message id (value)")
    return Rec(
        line=line, index=d["index"], time=d["time"], type=type_, process=process, f=f,
        value=value, node=as_text(d.get("node")), publisher=d.get("publisher"),
        seq=d.get("seq"), consumer=as_text(d.get("consumer")),
        redelivered=d.get("redelivered"), error=as_text(d.get("error")),
    )


@dataclass(slots=True)
class Message:
    """What the history says about one message id. Indexes are history indexes; `acked_*` count
    acked deliveries only, the others every delivery."""

    inv_line: int | None = None
    inv_process: int | None = None
    inv_time: int | None = None
    outcome: str | None = None  # ok | fail | info; None while (or if forever) open
    comp_time: int | None = None
    error: str | None = None  # the failed completion's error text
    deliveries: int = 0
    unflagged: int = 0
    first_flagged: bool | None = None
    first_flag_index: int | None = None  # the first flagged delivery
    last_unflagged_index: int | None = None  # the last unflagged delivery
    acked: int = 0
    acked_unflagged: int = 0
    first_acked: tuple[int, bool] | None = None  # (index, flag) of the first acked delivery
    first_flag_ack_index: int | None = None  # the first ack of a flagged delivery


@dataclass
class Scan:
    """Everything the sections need, gathered in one pass over a valid history. `pending` holds,
    per (process, consumer tag, id), the deliveries not acknowledged yet, first in first out:
    (index, flag)."""

    messages: dict[str, Message] = field(default_factory=dict)
    deliveries: list[Rec] = field(default_factory=list)
    nemesis: list[NemesisOp] = field(default_factory=list)
    harness: list[HarnessEvent] = field(default_factory=list)
    pending: dict[tuple[int, str, str], deque[tuple[int, bool]]] = field(default_factory=dict)
    acks: int = 0
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
    if r.type == "fail":
        m.error = r.error


def _stream(r: Rec) -> tuple[int, str, str]:
    assert isinstance(r.process, int)
    return r.process, r.consumer or "", r.value


def _deliver(scan: Scan, r: Rec) -> None:
    m = scan.messages.get(r.value)
    if m is None:
        m = scan.messages[r.value] = Message()
    flagged = r.redelivered is True
    m.deliveries += 1
    if m.deliveries == 1:
        m.first_flagged = flagged
    if flagged:
        if m.first_flag_index is None:
            m.first_flag_index = r.index
    else:
        m.unflagged += 1
        m.last_unflagged_index = r.index
    # First in, first out: a channel given one message twice acks the earlier delivery first.
    scan.pending.setdefault(_stream(r), deque()).append((r.index, flagged))
    scan.deliveries.append(r)


def _ack(scan: Scan, r: Rec, path: Path | str | None) -> None:
    waiting = scan.pending.get(_stream(r))
    if not waiting:
        raise HistoryError(orphan_ack_message(r.value), r.line, path)
    index, flagged = waiting.popleft()
    m = scan.messages[r.value]
    scan.acks += 1
    m.acked += 1
    if not flagged:
        m.acked_unflagged += 1
    if m.first_acked is None or index < m.first_acked[0]:
        m.first_acked = (index, flagged)
    if flagged and m.first_flag_ack_index is None:
        m.first_flag_ack_index = r.index


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
            elif r.f == ACK and r.type == "ok":
                _ack(scan, r, path)
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
        "recovered", "delivered_failed", "lost_unacked", "unflagged_after_ack")}
    counts = dict.fromkeys(("attempt_count", "acknowledged_count", "ok_count", "fail_count",
                            "info_count", "delivery_count", "acked_delivery_count"), 0)
    acks = scan.acks > 0
    for mid, m in scan.messages.items():
        if acks:
            n, unflagged, flag_ack = m.acked, m.acked_unflagged, m.first_flag_ack_index
            first_flagged = m.first_acked[1] if m.first_acked else None
        else:
            n, unflagged, flag_ack = m.deliveries, m.unflagged, m.first_flag_index
            first_flagged = m.first_flagged
        attempted = m.inv_line is not None
        received = m.deliveries > 0
        delivered = n > 0
        counts["delivery_count"] += m.deliveries
        counts["acked_delivery_count"] += n
        if attempted:
            counts["attempt_count"] += 1
            counts["acknowledged_count"] += m.outcome == "ok"
            counts["fail_count"] += m.outcome == "fail"
            counts["info_count"] += m.outcome in ("info", None)
        if delivered and attempted:
            counts["ok_count"] += 1
        if m.outcome == "ok" and not delivered:
            sets["lost"].append(mid)
            if received:
                sets["lost_unacked"].append(mid)
        if received and not attempted:
            sets["unexpected"].append(mid)
        if attempted and n > 1:
            sets["duplicated"].append(mid)
            extra_unflagged = unflagged - (0 if first_flagged else 1)
            key = "unflagged_duplicated" if extra_unflagged > 0 else "redelivered_duplicated"
            sets[key].append(mid)
        if attempted and delivered and m.outcome in ("info", None):
            sets["recovered"].append(mid)
        if delivered and m.outcome == "fail":
            sets["delivered_failed"].append(mid)
        if (flag_ack is not None and m.last_unflagged_index is not None
                and m.last_unflagged_index > flag_ack):
            sets["unflagged_after_ack"].append(mid)
    for k, ids in sets.items():
        counts[f"{k}_count"] = len(ids)
    return counts, {k: sorted_sample(ids, sample_size) for k, ids in sets.items()}


def fail_reasons(scan: Scan, limit: int) -> dict[str, int]:
    """Takes a scan and a limit. Returns the failed publishes counted by error text (top `limit`)."""
    reasons: Counter[str | None] = Counter(
        m.error for m in scan.messages.values() if m.inv_line is not None and m.outcome == "fail")
    return top_reasons(reasons, limit)


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
        return queue_section(counts, samples, drain_state(scan.harness), options,
                             fail_reasons=fail_reasons(scan, options.sample_size),
                             acks_recorded=scan.acks > 0)

    def publish_of(mid: str) -> tuple[int | None, str | None] | None:
        m = scan.messages.get(mid)
        return None if m is None or m.inv_line is None else (m.inv_process, m.outcome)

    def ordering() -> dict[str, Any]:
        return ordering_section(options.strict_order, **ordering_facts(
            scan.deliveries, options.strict_order, options.example_size, options.sample_size,
            publish_of))

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

