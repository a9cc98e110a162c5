"""Settlement after a heal: was every publish across a heal settled, and every staying consumer
fed again, within the liveness bound? Pure: the facts come from checkers.spark_settlement (or,
in the tests, the pure-Python oracle), which also gives each publish its
status by the rules below; the rest of the judgement is here.

A client that stays through a fault (workloads.queue_workload, `stay`) is the
one that meets a broker's recovery bugs: a confirm that never comes after the
heal, a channel whose later publishes are all accepted and never confirmed, a
consumer still subscribed that is never fed again while its queue holds ready
messages. With H a heal (the end of a fault window no other window covers), N
the start of the next fault after it, B the liveness bound and M the main
phase's end:

- every publish in flight at H (invoked before it, not completed by it) or
  invoked after it and before N crosses H; its deadline there is
  max(invoke, H) + B. A publish is judged at the first heal it crosses, unless
  it is interrupted there and still in flight at a later heal: then at the
  next heal it crosses, and so on (a publish a fault cut off from its heal's
  bound is judged again at the heal after that fault). It is *settled* when the broker settled it
  by the deadline: a confirm (`ok`), a nack or a return (`fail`), or its
  connection closed (`info` with the connection's error). It is *stuck* (a
  finding: the run is invalid) when it was still unsettled at the deadline on
  a channel that stayed open: its completion came later, whatever it was (a
  late confirm, the staying client's own deadline, the end of the run).
  Otherwise: *given up* when the client stopped waiting before the deadline
  (a retiring client's publish timeout: no judgement of the broker),
  *unknown* when the main phase ended before the deadline or the history has
  no completion of it (cut short: every client ends what it sent, `info` at
  the latest, so nothing is guessed), *interrupted* when
  the next fault began before it and no later heal found it in flight,
  *not judged* on a blocked connection (a
  resource alarm) or with confirms off;
- a consumer process *stayed subscribed* through H when it was fed before H
  and no cancel or close of it (checkers.model's consumer ends) came before
  H + B. It is *fed* when a delivery reached it in [H, H + B], and *stuck* (a
  finding) when none did although every depth sample of its queue in
  [H, H + B] showed ready messages, and it held nothing unacked at H + B (a
  consumer at its prefetch is owed nothing). Otherwise *unknown* (the main
  phase ended before H + B, or no depth sample in it), *interrupted*, *idle*
  (a sample showed no ready message), *holding*, or *ended* (it was cancelled
  or closed before H + B: not judged). On a log every consumer reads whole
  from its first offset (a stream: `reads_whole_log`), "ready" is its own:
  it is *stuck* when some message confirmed before H (so in the log) had not
  reached it by H + B (`owed`), *idle* when it had read every one; the depth
  samples count the log, not what this reader has left. Consumers are judged
  only where the harness observed its clients (f "clients"), on a queue whose
  consumers share its ready messages (`consumers_share`) or a log each reads
  whole, without a single active consumer (the others wait by design), and
  when they stay; elsewhere they are *not judged*, with the reason
  (`consumers_not_judged`).

Each finding names the queue, the process, its node, the publisher, the
queue's leader at H where the history has placement observations, and a
timeline (ms of the run): the channel's last confirm before H, H, the stuck
publish, and the channel's later publishes with their fates; the section's
`explanations` quote what RabbitMQ documents of each kind of stuck client it
found (EXPLANATIONS), and join the liveness section's when it is false. The section's
`valid` is false with any stuck client, "unknown" with any unknown one or
when nothing was settled or fed (nothing judged the broker), else true; it joins the liveness section (`merged`), which composes with the run's
verdict only when false.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from checkers.liveness import STALLED, summary_line
from checkers.model import ns_to_ms
from checkers.phases import HarnessEvent
from history import CLIENTS
from history.faults import FaultWindow

# How a publish completed (the Spark job's `kind` column, by the rules above).
CONFIRMED: Final = "confirmed"
REFUSED: Final = "refused"  # nack or return
CLOSED: Final = "connection-closed"
GAVE_UP: Final = "client-gave-up"
RUN_ENDED: Final = "run-ended"
BLOCKED: Final = "blocked"
CONFIRMS_OFF: Final = "confirms-off"
NONE: Final = "never-completed"
SETTLING_KINDS: Final = frozenset({CONFIRMED, REFUSED, CLOSED})

# The publisher's own info errors (workloads.publisher), and the prefix of the rest of a
# window spent with the first.
TIMEOUT_PREFIX: Final = "no confirm within"
CLOSE_PREFIX: Final = "publisher closed with the message in flight"
ABANDONED_PREFIX: Final = "abandoned with the process after: "
BLOCKED_ERROR: Final = "blocked"
CONFIRMS_OFF_ERROR: Final = "confirms off"

# Statuses of a publish or a consumer across a heal.
SETTLED: Final = "settled"
FED: Final = "fed"
STUCK: Final = "stuck"
GIVEN_UP: Final = "given-up"
UNKNOWN: Final = "unknown"
INTERRUPTED: Final = "interrupted"
NOT_JUDGED: Final = "not-judged"
IDLE: Final = "idle"
HOLDING: Final = "holding"
ENDED: Final = "ended"

# What RabbitMQ documents of each kind of stuck client, quoted (the publisher confirms guide,
# "Negative Acknowledgments for Publishes"; the consumers guide, "The Basics" and
# "Registering a Consumer"), with the harness's rule beside it.
EXPLANATIONS: Final = {
    "stuck_publish": (
        "A publish on a channel in confirm mode that the broker neither confirmed nor nacked "
        "(nor returned, nor closed the channel or connection of) within the liveness bound "
        "after a heal, though the channel stayed open. RabbitMQ's publisher confirms guide: "
        "\"After a channel is put into confirm mode, all subsequently published messages will "
        "be confirmed or nack'd once. No guarantees are made as to how soon a message is "
        "confirmed.\" The bound is the harness's, not RabbitMQ's (detection of the partition "
        "plus the grace it gives a node to serve again after the heal): each finding says how "
        "long its publish stayed unsettled, to the run's end when it never settled."),
    "stuck_consumer": (
        "A consumer that stayed subscribed through a heal and was fed nothing within the "
        "liveness bound after it, holding nothing unacknowledged, while every sample of its "
        "queue's depth showed ready messages. RabbitMQ's consumers guide: \"When a new consumer "
        "is added, assuming there are already messages ready in the queue, deliveries will start "
        "immediately\", and \"After a subscription is in place, RabbitMQ will begin delivering "
        "messages.\""),
    "stuck_log_consumer": (
        "A consumer of a stream, reading it from its first offset, that stayed subscribed "
        "through a heal and was fed nothing within the liveness bound after it, holding nothing "
        "unacknowledged, while messages confirmed before the heal (so written to the stream's "
        "log) had not reached it. RabbitMQ's streams guide: \"To read messages from a stream in "
        "RabbitMQ, one or more consumers subscribe to it and read the same message as many "
        "times as they want\"; the offset \"first\" \"starts from the first available message "
        "in the log\". The harness sets no retention limit (workloads.kinds.stream), so the log "
        "keeps every message and a reader from the first offset is owed every confirmed "
        "message it has not read."),
}
# A finding's timeline shows this many of the channel's later publishes (all are counted).
LATER_SHOWN: Final = 10
# At most this many findings of each kind are written out (all are counted).
MAX_FINDINGS: Final = 20


@dataclass(frozen=True)
class Heal:
    """A heal: when (ns), the fault it ended, and when the next fault began (None: none did)."""

    at: int
    fault: str
    next_fault: int | None = None


def heals(windows: Sequence[FaultWindow]) -> list[Heal]:
    """Takes the fault windows. Returns the heals, in time order: each window's end that no
    other window covers, with the next window's start after it."""
    ends = sorted({w.end_ns: w for w in windows if w.closed_by is not None}.items())
    out = []
    for at, w in ends:
        if any(x.start_ns <= at < x.end_ns for x in windows):
            continue
        later = [x.start_ns for x in windows if x.start_ns > at]
        out.append(Heal(at, w.f, min(later) if later else None))
    return out


@dataclass(frozen=True)
class Fate:
    """One publish of a channel: its id, invocation and completion (ns; None: none), how it
    completed and its status across the heal."""

    value: str
    invoke: int
    end: int | None
    kind: str
    status: str

    def as_dict(self) -> dict[str, Any]:
        """Returns the fate for a finding's timeline (ms of the run)."""
        return {"id": self.value, "sent_ms": ns_to_ms(self.invoke),
                "completed_ms": None if self.end is None else ns_to_ms(self.end),
                "completion": self.kind, "status": self.status}


@dataclass(frozen=True)
class StuckChannel:
    """A publishing process with a publish stuck across heal number `heal`: its node and queue,
    how many of its publishes are stuck, the first of them, its last confirm before the heal
    (ns; None: none), its later publishes (the first LATER_SHOWN) and their count per status."""

    heal: int
    pid: int
    node: str | None
    queue: str | None
    stuck: int
    first: Fate
    last_confirm_before: int | None = None
    later: tuple[Fate, ...] = ()
    later_counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ConsumerFacts:
    """A consumer process around heal number `heal` (ns; None: no such op): its last delivery
    before the heal, its first at or after it, its first cancel or close, and the deliveries
    and acks it had by heal + bound (acks None: the history records none); on a log it reads
    whole, how many messages confirmed before the heal had not reached it by heal + bound (None:
    not counted, the queue's consumers share its messages)."""

    heal: int
    pid: int
    node: str | None
    queue: str | None
    fed_before: int | None
    fed_after: int | None
    ended: int | None
    delivered_by_bound: int = 0
    acked_by_bound: int | None = None
    owed: int | None = None


def ready_through(harness: Sequence[HarnessEvent], queue: str | None, start: int,
                  end: int) -> bool | None:
    """Takes the harness events, a queue and a span (ns). Returns whether every depth sample of
    the queue in it showed ready messages (None: no sample with a count)."""
    readies = [e.value.get("ready") for e in harness
               if e.f == "depth" and isinstance(e.value, dict) and start <= e.time <= end
               and e.value.get("queue") in (None, queue)]
    counts = [r for r in readies if isinstance(r, int)]
    return all(r > 0 for r in counts) if counts else None


def leader_at(harness: Sequence[HarnessEvent], queue: str | None, t: int) -> str | None:
    """Takes the harness events, a queue and a time (ns). Returns the queue's leader as the last
    placement observation at or before it says, or None."""
    seen = [e for e in harness if e.f == "placement" and isinstance(e.value, dict)
            and e.time <= t and e.value.get("queue") in (None, queue)]
    return seen[-1].value.get("leader") if seen else None


def _clients(harness: Sequence[HarnessEvent], queue: str | None) -> dict[str, Any] | None:
    """Takes the harness events and a queue (None: any). Returns the last observation of the
    clients of the queue, or None."""
    seen = [e.value for e in harness if e.f == CLIENTS and isinstance(e.value, dict)
            and (queue is None or e.value.get("queue") in (None, queue))]
    return seen[-1] if seen else None


def _whole_log(seen: Mapping[str, Any]) -> bool:
    """Takes a clients observation. Returns whether each consumer reads the queue whole, from
    its first offset (an observation from before `reads_from` was recorded is of a stream whose
    consumers all did)."""
    return not seen.get("consumers_share") and seen.get("reads_from", "first") == "first"


def reads_whole_log(harness: Sequence[HarnessEvent], queue: str | None) -> bool:
    """Takes the harness events and a queue (None: any). Returns whether its consumers each read
    it whole from its first offset (a stream), so that each is owed every confirmed message."""
    seen = _clients(harness, queue)
    return seen is not None and _whole_log(seen)


def consumers_not_judged(harness: Sequence[HarnessEvent], queue: str | None) -> str | None:
    """Takes the harness events and a queue. Returns why its consumers cannot be judged stuck
    (no observation of the clients; a log read from elsewhere than its first offset; single
    active consumer; consumers that do not stay), or None when they can."""
    seen = _clients(harness, queue)
    if seen is None:
        return "the history has no observation of its clients (f \"clients\")"
    if not seen.get("consumers_share") and not _whole_log(seen):
        return (f"its consumers do not share its ready messages ({seen.get('type')}: each "
                f"reads at its own offset, from {seen.get('reads_from')}, not the first)")
    if seen.get("single_active_consumer"):
        return "with a single active consumer the others wait by design"
    if seen.get("stay") not in ("consumers", "both"):
        return "its consumers do not stay through faults (--stay consumers or both judges them)"
    return None


def consumer_status(c: ConsumerFacts, heal: Heal, bound: int, main_end: int,
                    ready: bool | None) -> str | None:
    """Takes a consumer's facts around a heal, the heal, the bound (ns), the main phase's end and
    whether its queue showed ready messages through [heal, heal + bound]. Returns its status (the
    module's rules), or None when it did not stay subscribed through the heal."""
    until = heal.at + bound
    if c.fed_before is None or (c.ended is not None and c.ended < heal.at):
        return None
    if c.fed_after is not None and c.fed_after <= until:
        return FED
    if main_end < until:
        return UNKNOWN
    if c.ended is not None and c.ended <= until:
        return ENDED
    if heal.next_fault is not None and until > heal.next_fault:
        return INTERRUPTED
    if c.acked_by_bound is not None and c.acked_by_bound < c.delivered_by_bound:
        return HOLDING
    if ready is None:
        return UNKNOWN
    return STUCK if ready else IDLE


def _secs(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / 1e9:.1f} s"


def publish_finding(ch: StuckChannel, heal: Heal, bound: int,
                    harness: Sequence[HarnessEvent]) -> dict[str, Any]:
    """Takes a stuck channel, its heal, the bound (ns) and the harness events. Returns its
    finding: who, where, the leader at the heal, and the timeline."""
    first = ch.first
    publisher = first.value.partition("-")[0]
    late = (f"it completed {first.kind} only {_secs(first.end - heal.at)} after the heal"
            if first.end is not None else "it never completed")
    text = (f"publish {first.value} of publisher {publisher} (process {ch.pid}, through "
            f"{ch.node}) to queue {ch.queue} was not settled within the bound ({_secs(bound)}) "
            f"after the heal at {_secs(heal.at)} on a channel that stayed open: {late}; "
            f"{ch.stuck} publish(es) of that channel stuck")
    return {"what": "publish", "status": STUCK, "queue": ch.queue, "node": ch.node,
            "process": ch.pid, "publisher": publisher, "stuck": ch.stuck,
            "leader_at_heal": leader_at(harness, ch.queue, heal.at),
            "heal_ms": ns_to_ms(heal.at), "bound_ms": ns_to_ms(bound),
            "timeline": {
                "last_confirm_before_ms": None if ch.last_confirm_before is None
                else ns_to_ms(ch.last_confirm_before),
                "heal_ms": ns_to_ms(heal.at), "stuck": first.as_dict(),
                "later": [f.as_dict() for f in ch.later], "later_counts": dict(ch.later_counts)},
            "statement": text}


def consumer_finding(c: ConsumerFacts, heal: Heal, bound: int,
                     harness: Sequence[HarnessEvent]) -> dict[str, Any]:
    """Takes a stuck consumer's facts, its heal, the bound (ns) and the harness events. Returns
    its finding with its timeline."""
    later = (f"it was fed again only {_secs(c.fed_after - heal.at)} after the heal"
             if c.fed_after is not None else "it was never fed again")
    held = ("its queue held ready messages" if c.owed is None else
            f"{c.owed} message(s) confirmed before the heal, in the log it reads from the first "
            "offset, had not reached it")
    text = (f"consumer process {c.pid} (through {c.node}) of queue {c.queue} stayed subscribed "
            f"through the heal at {_secs(heal.at)} and was fed nothing within the bound "
            f"({_secs(bound)}) while {held}: {later}")
    return {"what": "consumer", "status": STUCK, "queue": c.queue, "node": c.node,
            "process": c.pid, "owed": c.owed,
            "leader_at_heal": leader_at(harness, c.queue, heal.at),
            "heal_ms": ns_to_ms(heal.at), "bound_ms": ns_to_ms(bound),
            "timeline": {"last_fed_before_ms": None if c.fed_before is None
                         else ns_to_ms(c.fed_before), "heal_ms": ns_to_ms(heal.at),
                         "first_fed_after_ms": None if c.fed_after is None
                         else ns_to_ms(c.fed_after),
                         "ended_ms": None if c.ended is None else ns_to_ms(c.ended)},
            "statement": text}


def _tally(statuses: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in statuses:
        out[s] = out.get(s, 0) + 1
    return dict(sorted(out.items()))


def settlement_section(counts: Mapping[tuple[int, str], int], channels: Sequence[StuckChannel],
                       consumers: Sequence[ConsumerFacts], heal_list: Sequence[Heal],
                       bound: int, main_end: int,
                       harness: Sequence[HarnessEvent]) -> dict[str, Any]:
    """Takes the publishes' statuses counted per (heal number, status), the channels with a
    stuck publish, the consumers' facts per heal, the heals, the bound (ns), the main phase's
    end and the harness events. Returns the `settlement` part of the liveness section."""
    publishes: dict[str, int] = {}
    for (_heal, outcome), n in counts.items():
        publishes[outcome] = publishes.get(outcome, 0) + n
    judged = []
    unjudged: dict[str | None, str] = {}
    # What the clients observation says of each queue, read once per queue.
    queues = {c.queue for c in consumers}
    log = {q: reads_whole_log(harness, q) for q in queues}
    why_not = {q: consumers_not_judged(harness, q) for q in queues}
    for c in consumers:
        heal = heal_list[c.heal]
        ready = (ready_through(harness, c.queue, heal.at, heal.at + bound)
                 if not log[c.queue] else None if c.owed is None else c.owed > 0)
        status = consumer_status(c, heal, bound, main_end, ready)
        why = why_not[c.queue]
        if status is not None and why is not None:
            unjudged[c.queue] = why
            status = NOT_JUDGED
        if status is not None:
            judged.append((c, status))
    stuck_consumers = [c for c, s in judged if s == STUCK]
    ordered = sorted(channels, key=lambda ch: (ch.heal, ch.first.invoke, ch.pid))
    findings = [publish_finding(ch, heal_list[ch.heal], bound, harness)
                for ch in ordered[:MAX_FINDINGS]]
    findings += [consumer_finding(c, heal_list[c.heal], bound, harness)
                 for c in sorted(stuck_consumers, key=lambda c: (c.heal, c.pid))[:MAX_FINDINGS]]
    tally = _tally([s for _c, s in judged])
    every = {**{f"publish {k}": v for k, v in publishes.items()},
             **{f"consumer {k}": v for k, v in tally.items()}}
    # True needs something the broker settled or fed, and nothing left unknown.
    valid: bool | str = (False if publishes.get(STUCK) or tally.get(STUCK)
                         else "unknown" if any(k.endswith(UNKNOWN) for k in every)
                         or not (publishes.get(SETTLED) or tally.get(FED))
                         else True)
    return {"valid": valid, "bound_ms": ns_to_ms(bound),
            "heals": [{"at_ms": ns_to_ms(h.at), "fault": h.fault,
                       "next_fault_ms": None if h.next_fault is None else ns_to_ms(h.next_fault)}
                      for h in heal_list],
            "publishes": dict(sorted(publishes.items())), "consumers": tally,
            "stuck_channels": len(channels), "stuck_consumers": len(stuck_consumers),
            "consumers_not_judged": "; ".join(f"queue {q}: {w}" for q, w in
                                              sorted(unjudged.items(), key=str)) or None,
            "findings": findings, "summary": _summary(valid, publishes, tally),
            "explanations": {k: EXPLANATIONS[k] for k, n in (
                ("stuck_publish", publishes.get(STUCK)),
                ("stuck_consumer", sum(c.owed is None for c in stuck_consumers)),
                ("stuck_log_consumer", sum(c.owed is not None for c in stuck_consumers)))
                if n}}


def _summary(valid: bool | str, publishes: Mapping[str, int], consumers: Mapping[str, int]
             ) -> str:
    said = (", ".join(f"{n} {k}" for k, n in sorted(publishes.items())) or "none")
    fed = (", ".join(f"{n} {k}" for k, n in consumers.items()) or "none")
    head = {True: "settled", False: "stuck", "unknown": "unknown"}[valid]  # type: ignore[index]
    return f"{head}: publishes across a heal: {said}; consumers through a heal: {fed}"


def merged(liveness: dict[str, Any], settlement: dict[str, Any]) -> dict[str, Any]:
    """Takes the liveness section and the settlement part. Returns the liveness section with it
    (`settlement`): its stuck findings join the section's, and make it false."""
    out = {**liveness, "settlement": settlement}
    if settlement["valid"] is False:
        out["valid"] = False
        out["status"] = STALLED
        out["findings"] = [*liveness.get("findings", []), *settlement["findings"]]
        out["explanations"] = {**liveness.get("explanations", {}), **settlement["explanations"]}
        out["summary"] = summary_line(out)
    return out
