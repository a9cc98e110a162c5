"""The pipelined publisher's bookkeeping, against a scripted connection (no broker)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pika.exceptions
import pika.spec

from tests.fakes import ListRecorder
from workloads.clients import ClientOptions, PublisherSlot
from workloads.publisher import Publisher


class Script:
    """A connection and channel: publishes are kept; process_data_events plays queued frames."""

    def __init__(self) -> None:
        self.published: list[Any] = []
        self.frames: list[Any] = []
        self.fail_publish: Exception | None = None
        self.pub: Publisher | None = None

    # channel impl
    def basic_publish(self, exchange: str, routing_key: str, body: bytes, properties: Any,
                      mandatory: bool) -> None:
        if self.fail_publish is not None:
            raise self.fail_publish
        self.published.append(properties)

    # connection
    def process_data_events(self, time_limit: float = 0) -> None:
        assert self.pub is not None
        frames, self.frames = self.frames, []
        for kind, arg in frames:
            if kind == "return":
                self.pub._on_return(None, SimpleNamespace(reply_text="NO_ROUTE"),
                                    SimpleNamespace(message_id=arg), b"")
            else:
                tag, multiple = arg
                method = (pika.spec.Basic.Nack if kind == "nack" else pika.spec.Basic.Ack)(
                    delivery_tag=tag, multiple=multiple)
                self.pub._on_confirm(SimpleNamespace(method=method))
        if not frames:
            time.sleep(min(time_limit, 0.01))

    def add_callback_threadsafe(self, _fn: Any) -> None:
        pass


def publisher(window: int = 3, timeout: float = 5.0, slot: PublisherSlot | None = None
              ) -> tuple[Publisher, Script, ListRecorder]:
    rec, script = ListRecorder(), Script()
    pub = Publisher(rec, "q", "n1", "10.0.0.1", 7,
                    ClientOptions(window=window, publish_timeout_s=timeout), slot)
    pub.conn, pub._impl, script.pub = script, script, pub  # type: ignore[assignment]
    return pub, script, rec


def completions(rec: ListRecorder) -> list[tuple[str, str, str | None]]:
    return [(o.value, o.type, o.error) for o in rec.ops if o.type != "invoke"]


def test_a_window_of_messages_completes_by_multiple_ack_nack_and_return() -> None:
    pub, script, rec = publisher(window=4)
    for _ in range(4):
        pub.send()
    assert pub.in_flight == 4 and [o.type for o in rec.ops] == ["invoke"] * 4
    assert [o.value for o in rec.ops] == ["7-0", "7-1", "7-2", "7-3"]
    script.frames = [("ack", (2, True)), ("return", "7-3"), ("nack", (3, False)),
                     ("ack", (4, False))]
    pub.settle()
    assert completions(rec) == [("7-0", "ok", None), ("7-1", "ok", None),
                                ("7-2", "fail", "nack"), ("7-3", "fail", "returned: unroutable")]
    assert pub.in_flight == 0 and not pub.spent and pub.confirmed == 2
    inv = rec.ops[0]
    assert all(o.process == 7 and o.publisher == 7 for o in rec.ops) and inv.seq == 0


def test_a_missing_confirm_spends_the_process_and_abandons_the_rest() -> None:
    pub, script, rec = publisher(window=3, timeout=0.05)
    pub.send()
    pub.send()
    script.frames = [("ack", (2, False))]  # the second is confirmed, the first never is
    pub.drive(time.monotonic() + 1)
    assert pub.spent
    assert completions(rec) == [("7-1", "ok", None), ("7-0", "info", "no confirm within 0.05s")]
    pub.close()


def test_a_broken_connection_makes_everything_in_flight_unknown() -> None:
    pub, script, rec = publisher(window=3)
    pub.send()
    script.fail_publish = pika.exceptions.StreamLostError("reset")
    pub.send()
    assert pub.spent
    assert [(v, t) for v, t, _e in completions(rec)] == [("7-1", "info"), ("7-0", "info")]
    assert "StreamLostError" in (rec.ops[-2].error or "")
    assert (rec.ops[-1].error or "").startswith("abandoned with the process after:")


def test_window_one_publishes_one_at_a_time_and_returns_the_outcome() -> None:
    pub, script, rec = publisher(window=1)
    script.frames = [("ack", (1, False))]
    assert pub.publish() == "ok"
    pub.send()
    started = time.monotonic()
    pub.wait_for_room(started + 0.1)  # nothing confirms the second: no room before the deadline
    assert pub.in_flight == 1 and time.monotonic() - started >= 0.09


def test_a_slot_keeps_one_sequence_across_processes() -> None:
    slot = PublisherSlot(2)
    first, s1, rec1 = publisher(slot=slot)
    first.send()
    first.close()
    second, s2, rec2 = publisher(slot=slot)
    second.send()
    assert [o.value for o in rec1.ops if o.type == "invoke"] == ["2-0"]
    assert [o.value for o in rec2.ops if o.type == "invoke"] == ["2-1"]
    assert rec1.ops[-1].type == "info" and rec1.ops[-1].process == 7
