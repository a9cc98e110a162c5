"""The ordering check: what order RabbitMQ promises, how the checkers test it, and the plain-Python
implementation the reference engine runs (checkers.spark_order is the Spark one).

What RabbitMQ promises (rabbitmq.com/docs/queues, "Message ordering"): "When
publishing on a single channel, messages are enqueued in publishing order in
every queue they are routed to. When publishing happens on multiple
connections or channels, their sequences of messages will be routed
concurrently and interleaved. Delivery from a queue to consumers proceeds in
enqueue order", unless priorities or "multiple active consumers on the same
queue" with redeliveries change it; "Redelivered messages are flagged (...
AMQP 0-9-1: redelivered=true)". To preserve order it advises a single active
consumer (SAC: "only one consumer at a time consuming from a queue"; when it
is cancelled or dies "another consumer is selected as the active one") and,
for quorum queues, a delivery limit, which "ensures messages are requeued at
the front of the queue" (RabbitMQ 3.x quorum queues always deliver returned
messages before the others).

Terms. A delivery's *publisher* and *seq* are its `publisher` and `seq`
fields, else parsed from its message id "<publisher>-<seq>"; a delivery with
neither is not checked. A publisher is a stable slot whose seq keeps
increasing across the processes (connections) that publish for it in turn (a
process whose publish ended `info` retires and the next one continues the
seq); older histories used the process itself as the publisher. A *consumer*
is a process and a consumer tag. Order is history (index) order. Acks play no
part: order is about what the broker dispatched, acked or not.

Streams. By default, the deliveries of one publisher's messages to one
consumer. In strict mode (quorum queue + single active consumer + prefetch 1),
the deliveries of one publisher's messages to every consumer of the queue, in
history order: the next active consumer continues where the last one stopped.

Violations. Each delivery d of a stream is compared with an earlier one p:

- default mode, d unflagged: p is the previous unflagged delivery of the
  stream, and d.seq <= p.seq is a violation: RabbitMQ dispatches in enqueue
  order, and a first delivery is unflagged. These decide validity.
- default mode, d flagged: p is the previous delivery of the stream (flagged
  or not), and d.seq < p.seq is a *flagged violation*: a requeued message came
  back after later ones, which RabbitMQ allows. Counted (flagged_violation_count),
  never invalid. A flagged d with p's seq is the same message redelivered, fine.
- strict mode: p is the previous delivery of the stream (any flag, any
  consumer), and d.seq < p.seq, or d.seq == p.seq with d unflagged, is a
  violation. With prefetch 1 a consumer holds at most one unacknowledged
  message; when the consumer goes, that message returns to the front and is
  delivered again, flagged, to the same or the next active consumer, which then
  continues after it. So a message may repeat only flagged and right after
  itself. Every violation decides validity; those with d flagged are also
  counted in flagged_violation_count.

Unconfirmed reorders. Between channels, only time orders messages: one
confirmed before another was published is ahead of it in the queue, but one
whose publish was not confirmed (it ended `fail` or `info`, or never completed)
may have been enqueued any time later. So a violation (p, d) where d's message
was published by another process than p's and its publish was not confirmed
is not a violation: it is counted in unconfirmed_reorder_count instead (and in
no other count). d stays in the stream as the next comparison's p.

Reported: deliveries_checked (the deliveries whose order decides validity:
unflagged ones by default, all in strict mode), violation_count,
consumers_affected (the consumers of the violations' d), flagged_violation_count,
unconfirmed_reorder_count, and the first `example_size` of each kind by d's
index (examples, flagged_examples, unconfirmed_examples).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from checkers.model import consumer_identity, parse_message_id
from checkers.results import Delivery, Violation

# message id -> (process that invoked its publish, the publish's outcome), or None if never published.
PublishOf = Callable[[str], "tuple[int | None, str | None] | None"]


class DeliveryOp(Protocol):
    """What the ordering check reads of a delivery op."""

    index: int
    time: int
    process: int | str
    value: Any
    publisher: int | None
    seq: int | None
    consumer: str | None
    redelivered: bool | None


def unconfirmed_reorder(publish_of: PublishOf, earlier: str, later: str) -> bool:
    """Takes the publish lookup and the ids of a violation's p and d. Returns whether d's message
    was published by another process than p's and its publish was not confirmed."""
    p, d = publish_of(earlier), publish_of(later)
    if p is None or d is None or p[0] is None or d[0] is None:
        return False
    return d[0] != p[0] and d[1] != "ok"


def ordering_facts(deliveries: Iterable[DeliveryOp], strict: bool, example_size: int,
                   sample_size: int, publish_of: PublishOf) -> dict[str, Any]:
    """Takes deliveries in history order, the mode, the sizes and the publish lookup. Returns
    the ordering section's facts (see the module docstring), for `results.ordering_section`."""
    last_any: dict[tuple[Any, ...], Delivery] = {}
    last_unflagged: dict[tuple[Any, ...], Delivery] = {}
    checked = violations = flagged_count = unconfirmed = 0
    affected: set[tuple[int, str]] = set()
    examples: list[Violation] = []
    flagged_examples: list[Violation] = []
    unconfirmed_examples: list[Violation] = []
    for r in deliveries:
        parsed = parse_message_id(r.value)
        pub = r.publisher if r.publisher is not None else parsed[0] if parsed else None
        seq = r.seq if r.seq is not None else parsed[1] if parsed else None
        if pub is None or seq is None or not isinstance(r.process, int):
            continue
        flagged = r.redelivered is True
        tag = r.consumer or ""
        key: tuple[Any, ...] = (pub,) if strict else (r.process, tag, pub)
        here = Delivery(r.value, seq, r.index, r.time, flagged)
        if strict or not flagged:
            checked += 1
        if strict or flagged:
            prev = last_any.get(key)
            bad = prev is not None and (seq < prev.seq or (seq == prev.seq and not flagged))
        else:
            prev = last_unflagged.get(key)
            bad = prev is not None and seq <= prev.seq
        if bad and prev is not None:
            v = Violation(consumer_identity(r.process, r.consumer), pub, prev, here)
            if unconfirmed_reorder(publish_of, prev.id, here.id):
                unconfirmed += 1
                if len(unconfirmed_examples) < example_size:
                    unconfirmed_examples.append(v)
            else:
                if flagged:
                    flagged_count += 1
                    if len(flagged_examples) < example_size:
                        flagged_examples.append(v)
                if strict or not flagged:
                    violations += 1
                    affected.add((r.process, tag))
                    if len(examples) < example_size:
                        examples.append(v)
        last_any[key] = here
        if not flagged:
            last_unflagged[key] = here
    return {
        "deliveries_checked": checked,
        "violation_count": violations,
        "consumers_affected_count": len(affected),
        "consumers_affected": [consumer_identity(p, c) for p, c in sorted(affected)][:sample_size],
        "examples": examples,
        "flagged_violation_count": flagged_count,
        "flagged_examples": flagged_examples,
        "unconfirmed_reorder_count": unconfirmed,
        "unconfirmed_examples": unconfirmed_examples,
    }
