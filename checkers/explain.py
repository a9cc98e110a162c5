"""What each class of the queue section means, in plain English, for whoever reads results.json.

`explanations` returns one paragraph per class present in a check (its count
above zero), quoting RabbitMQ's documentation where a class contradicts it.
The texts are fixed; only the count, an example id and, for lost messages,
whether the drain completed are filled in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# RabbitMQ's documentation, quoted (rabbitmq.com/docs/confirms).
REDELIVER_DOC: Final = (
    "RabbitMQ's consumer acknowledgement guide: \"Redeliveries will have a special boolean "
    "property, redeliver, set to true by RabbitMQ. For first time deliveries it will be set to "
    "false.\"")
REQUEUE_DOC: Final = (
    "RabbitMQ's consumer acknowledgement guide: \"any delivery (message) that was not acked is "
    "automatically requeued when the channel (or connection) on which the delivery happened is "
    "closed\".")
NACK_DOC: Final = (
    "RabbitMQ's publisher confirms guide: by a basic.nack \"the broker indicates that it was "
    "unable to process the messages and refuses responsibility for them\".")

TEXTS: Final = {
    "lost": (
        "Confirmed by the broker (the publish ended ok on basic.ack) but never delivered and "
        "acknowledged by a consumer. A confirm means the broker took responsibility for the "
        "message, so it must come out of the queue, by the drain after healing at the latest."),
    "lost_unacked": (
        "Confirmed, and delivered, but no delivery of it was acknowledged (the consumer's "
        "channel closed before its basic.ack could be written), and it never came back. "
        + REQUEUE_DOC + " So the broker should have delivered it again, to the drain at the "
        "latest. These are counted in lost too."),
    "unexpected": (
        "Delivered although no publish of that id was ever invoked: the broker handed out a "
        "message that nobody sent (counted whether or not the delivery was acknowledged)."),
    "unflagged_duplicated": (
        "Delivered and acknowledged more than once, and at least one delivery after the first "
        "did not carry the redelivered flag. " + REDELIVER_DOC + " A second delivery without the "
        "flag means the broker handed out, as new, a message it had already delivered."),
    "redelivered_duplicated": (
        "Delivered and acknowledged more than once, every delivery after the first flagged "
        "redelivered. At-least-once delivery allows this (an acknowledgement lost with its "
        "channel makes the broker deliver the message again, flagged); it counts against the "
        "queue only when the check says flagged duplicates are invalid."),
    "unflagged_after_ack": (
        REDELIVER_DOC + " For each of these messages the history shows a delivery with "
        "redelivered=true that its consumer acknowledged, and after that acknowledgement a "
        "delivery of the same message with redelivered=false. The flagged delivery shows that "
        "the broker knew the message had been delivered before; the later unflagged one presents "
        "it as a first delivery, after it had been acknowledged, as if the queue had lost both "
        "its earlier deliveries and the acknowledgement (seen on a quorum queue under "
        "partition_handling=ignore: in flight to a consumer on the minority side when the "
        "partition began, redelivered and acknowledged on the majority, then delivered again, "
        "unflagged, to the minority's consumer after the partition healed)."),
    "unflagged_redelivered": (
        REDELIVER_DOC + " Each of these messages was delivered more than once, and a delivery "
        "after the first did not carry the redelivered flag, whether or not an earlier one was "
        "acknowledged: the broker handed out as new a message it had already delivered (seen on "
        "RabbitMQ 4.3's durable classic queues after a graceful restart: the deliveries still "
        "unacknowledged when the queue stopped came back unflagged)."),
    "delivered_failed": (
        "The publish was refused (it ended fail: basic.nack, or the mandatory message was "
        "returned) and the message was delivered and acknowledged anyway. Not an anomaly: "
        + NACK_DOC + " That does not say the message is absent, and, as Jepsen counts a "
        "delivered message whose publish was not acknowledged, it is reported, not held "
        "against the queue. fail_reasons says why the publishes failed (a message returned as "
        "unroutable reached no queue, so its delivery would deserve a closer look)."),
    "recovered": (
        "The publish's outcome was unknown (it ended info: no confirm before the deadline or the "
        "connection was lost; or the history ends before it completed), and the message was "
        "delivered: it had been enqueued after all. Not an anomaly."),
    "dropped_by_design": (
        "Never delivered: the queue dropped it by design, as it was configured to (a max "
        "length with overflow drop-head drops the oldest message; a quorum queue's delivery "
        "limit drops a message returned more often), and dead-lettered it to the harness's "
        "dead-letter queue, where the drain read it back with the reason in its x-death "
        "header. Not an anomaly, and not counted as lost."),
    "dead_lettered_delivered": (
        "Delivered and acknowledged, and also dead-lettered (read back from the harness's "
        "dead-letter queue): counted as delivered, not as dropped. It can be both when an "
        "acknowledgement written on a channel never reached the queue (the channel closed "
        "right after): the message came back, and the queue then dropped it at its limit."),
}
ORDER: Final = ("lost", "lost_unacked", "unexpected", "unflagged_duplicated", "unflagged_after_ack",
                "unflagged_redelivered", "redelivered_duplicated", "delivered_failed", "recovered", "dropped_by_design",
                "dead_lettered_delivered")
NOT_DRAINED: Final = (
    " The drain did not complete, so these messages may still be in the queue: they are not "
    "proven lost, and the verdict is unknown.")


def explanations(counts: Mapping[str, int], samples: Mapping[str, list[str]],
                 drain_complete: bool, *, unaccounted: str | None = None,
                 dropped_reasons: Mapping[str, int] | None = None) -> dict[str, str]:
    """Takes the queue counts, sorted id samples, whether the drain completed, why lost
    messages may have been dropped where the harness does not read (None: they cannot) and the
    messages dropped by design counted by reason. Returns {class: paragraph} for every class
    in ORDER whose count is above zero, in that order."""
    out = {}
    for key in ORDER:
        n = int(counts.get(f"{key}_count", 0))
        if not n:
            continue
        ids = samples.get(key) or []
        example = f" Example: {ids[0]}." if ids else ""
        text = f"{n} message{'s' if n != 1 else ''}. {TEXTS[key]}{example}"
        if key in ("lost", "lost_unacked") and not drain_complete:
            text += NOT_DRAINED
        elif key in ("lost", "lost_unacked") and unaccounted:
            text += (f" But {unaccounted}: these messages may have been dropped by design, so "
                     "they are not proven lost, and the verdict is unknown.")
        if key == "dropped_by_design" and dropped_reasons:
            text += " By reason: " + ", ".join(f"{r} {k}" for r, k in dropped_reasons.items()) + "."
        out[key] = text
    return out
