"""The publishing process: publishes with confirms, up to a window of messages in flight.

A publish is `invoke` when sent, `ok` on the broker's basic.ack (one ack may
confirm several tags at once: `multiple`), `fail` on basic.nack (error
"nack") or on a basic.return of the mandatory message (the return arrives
before the ack of the same message), and `info` when its own deadline passes
or the connection is lost after sending. After an `info` the process is
spent, as Jepsen retires a process whose op is unknown: every other message
still in flight on it is completed `info` as well ("abandoned with the
process"), and the caller opens a new process. A staying publisher
(workloads.queue_workload, `stay`) is the same process given a deadline of
minutes (its options' `publish_timeout_s` is then the confirm deadline), so it
keeps its channel through faults and heals until its connection closes; at the
run's end `settle(within=...)` waits no longer than a retiring one would.

A connection the broker blocks (AMQP `connection.blocked`: a memory or disk
alarm somewhere in the cluster; the broker then reads nothing more from it) is
recorded as a harness observation, f "blocked" with the broker's reason, and
"unblocked" when lifted (history.BLOCKED, UNBLOCKED). A message whose deadline
passes while its connection is blocked, or whose connection pika gives up on
for being blocked too long (ConnectionBlockedTimeout), completes `info` with
error "blocked", as does everything else in flight on it: the broker holds
those bytes unread and may still take them when the alarm clears, so they are
unknown, never `fail`.

A publisher given a priority draw (workloads.priorities) publishes each
message with the priority it draws (none: without the property) and records
it on the message's invoke and completion (`priority`).

With `window` 1 a process has one message in flight at a time; a larger
window pipelines, as a throughput-minded client does (per-channel order is
kept by the broker either way). pika's BlockingChannel.basic_publish waits for
each confirm with no deadline, so the publisher enables confirms on the
channel's underlying `pika.channel.Channel` (`_impl`, stable in the pinned
pika 1.3) and drives the connection's I/O itself.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pika.spec

from history import BLOCKED, BLOCKED_ERROR, HARNESS, UNBLOCKED, Op, OpType, Recorder
from workloads.clients import (
    AMQP_ERRORS,
    ClientError,
    ClientOptions,
    PublisherSlot,
    abandon,
    answer_within,
    connect,
    message_id,
)

log = logging.getLogger(__name__)


def _noop() -> None:
    pass


class Publisher:
    """One publishing process: a connection and confirm-mode channel to one node.

    Takes the recorder, queue name, node (short name and host), process number,
    options, the publisher slot whose sequence it continues and what draws each
    message's priority (None: no message has one). `send` publishes
    one message; `drive` runs I/O (confirms, returns, deadlines) until a time;
    `publish` does both for one message and returns its completion type.
    """

    def __init__(
        self, history: Recorder, queue: str, node: str, host: str, process: int,
        opts: ClientOptions, slot: PublisherSlot | None = None,
        priority: Callable[[], int | None] | None = None,
    ) -> None:
        self.history = history
        self.queue = queue
        self.node = node
        self.host = host
        self.process = process
        self.opts = opts
        self.conn: pika.BlockingConnection | None = None
        self._impl: Any = None
        # Without a slot the process is its own publisher (one process, one sequence).
        self.slot = slot if slot is not None else PublisherSlot(process)
        self._priority = priority
        self._tag = 0
        # In flight: delivery tag -> (invocation, deadline); returned message ids.
        self._pending: OrderedDict[int, tuple[Op, float]] = OrderedDict()
        self._returned: set[str] = set()
        self.spent = False
        self.last: str | None = None  # the type of the latest completion
        self.confirmed = 0
        self.blocked: str | None = None  # the broker's reason while it blocks the connection

    @property
    def in_flight(self) -> int:
        """Returns how many sent messages await their confirm."""
        return len(self._pending)

    def open(self) -> None:
        """Connects and puts the channel in confirm mode (unless confirms are off). Raises
        ClientError."""
        self.conn = connect(self.host, self.opts)
        try:
            self.conn.add_on_connection_blocked_callback(self._on_blocked)
            self.conn.add_on_connection_unblocked_callback(self._on_unblocked)
            with answer_within(self.conn, self.opts.answer_timeout_s, "channel.open"):
                ch = self.conn.channel()
            self._impl = ch._impl
            if not self.opts.confirms:
                return
            selected: list[object] = []
            self._impl.confirm_delivery(
                ack_nack_callback=self._on_confirm, callback=selected.append
            )
            self._impl.add_on_return_callback(self._on_return)
            deadline = time.monotonic() + self.opts.connect_timeout_s
            while not selected:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientError(f"confirm.select on {self.node} timed out")
                self.conn.process_data_events(time_limit=min(0.05, left))
        except AMQP_ERRORS as e:
            abandon(self.conn)
            self.conn = None
            raise ClientError(f"channel on {self.node}: {type(e).__name__}: {e}") from e

    # -- completions ---------------------------------------------------------------

    def _complete(self, inv: Op, type_: OpType, error: str | None = None) -> None:
        self.last = type_
        self.history.append(Op(
            type=type_, process=self.process, f="publish", value=inv.value, node=self.node,
            queue=self.queue, publisher=inv.publisher, seq=inv.seq, phase=inv.phase, error=error,
            priority=inv.priority,
        ))

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tags = ([t for t in self._pending if t <= method.delivery_tag] if method.multiple
                else [method.delivery_tag] if method.delivery_tag in self._pending else [])
        nack = isinstance(method, pika.spec.Basic.Nack)
        for tag in tags:
            inv, _deadline = self._pending.pop(tag)
            if nack:
                self._complete(inv, "fail", "nack")
            elif inv.value in self._returned:
                self._returned.discard(inv.value)
                self._complete(inv, "fail", "returned: unroutable")
            else:
                self._complete(inv, "ok")
                self.confirmed += 1
        if tags and self.conn is not None:
            # Impl callbacks do not end process_data_events; a no-op ready event does, so
            # a waiting loop returns now rather than at the end of its poll slice.
            self.conn.add_callback_threadsafe(_noop)

    def _on_return(self, _ch: Any, method: Any, props: Any, _body: bytes) -> None:
        if props is not None and props.message_id:
            self._returned.add(props.message_id)
        log.debug("message returned on %s: %s", self.node, method.reply_text)

    def _observe(self, f: str, reason: str | None) -> None:
        self.history.append(Op(
            type="info", process=HARNESS, f=f, node=self.node, queue=self.queue,
            value={"process": self.process, "publisher": self.slot.id, "reason": reason},
        ))

    def _on_blocked(self, _conn: Any, frame: Any) -> None:
        reason = getattr(getattr(frame, "method", None), "reason", None)
        self.blocked = str(reason or "blocked")
        log.info("connection of process %s on %s blocked: %s", self.process, self.node,
                 self.blocked)
        self._observe(BLOCKED, self.blocked)

    def _on_unblocked(self, _conn: Any, _frame: Any) -> None:
        self.blocked = None
        self._observe(UNBLOCKED, None)

    def _error_of(self, e: BaseException) -> str:
        """Returns the history error of an exception that ended the process."""
        if isinstance(e, pika.exceptions.ConnectionBlockedTimeout):
            return BLOCKED_ERROR
        return f"{type(e).__name__}: {e}"[:300]

    def _spend(self, first_tag: int | None, error: str) -> None:
        """Completes `first_tag` (or none) info with `error`, then everything else in flight
        (with "blocked" too when that is why: they sat behind it on the same blocked
        connection)."""
        self.spent = True
        if first_tag is not None and first_tag in self._pending:
            inv, _ = self._pending.pop(first_tag)
            self._complete(inv, "info", error)
        rest = error if error == BLOCKED_ERROR else \
            f"abandoned with the process after: {error}"[:300]
        for inv, _deadline in list(self._pending.values()):
            self._complete(inv, "info", rest)
        self._pending.clear()

    # -- sending and waiting -------------------------------------------------------------

    def send(self, phase: str = "main") -> Op:
        """Publishes one new message without waiting. Returns its invocation (recorded).

        With confirms off it is completed `info` at once ("confirms off"): nothing will say
        whether the broker took it, but the channel stays usable. Raises ClientError when
        the publisher is not open or spent.
        """
        if self.conn is None or self.spent:
            raise ClientError("publisher is not open")
        seq = self.slot.next_seq()
        mid = message_id(self.slot.id, seq)
        priority = self._priority() if self._priority is not None else None
        inv = self.history.append(Op(
            type="invoke", process=self.process, f="publish", value=mid, node=self.node,
            queue=self.queue, publisher=self.slot.id, seq=seq, phase=phase, priority=priority,
        ))
        self._tag += 1
        tag = self._tag
        self._pending[tag] = (inv, time.monotonic() + self.opts.publish_timeout_s)
        props = pika.BasicProperties(
            message_id=mid,
            delivery_mode=2 if self.opts.persistent else 1,
            headers={"publisher": self.slot.id, "seq": seq},
            priority=priority,
        )
        try:
            self._impl.basic_publish(
                exchange="", routing_key=self.queue, body=mid.encode(), properties=props,
                mandatory=self.opts.mandatory,
            )
            if not self.opts.confirms:
                self._pending.pop(tag)
                self.conn.process_data_events(time_limit=0)
                self._complete(inv, "info", "confirms off")
        except AMQP_ERRORS as e:
            self._spend(tag, self._error_of(e))
        return inv

    def drive(self, until: float, done: Callable[[], bool] | None = None) -> None:
        """Runs I/O until the monotonic time `until`, or sooner once `done()`, completing
        confirmed, nacked, returned and timed-out messages (a time-out spends the process)."""
        if self.conn is None or self.spent:
            return
        try:
            while done is None or not done():
                now = time.monotonic()
                wake = until
                if self._pending:
                    tag, (_inv, deadline) = next(iter(self._pending.items()))
                    if now >= deadline:
                        self._spend(tag, BLOCKED_ERROR if self.blocked is not None
                                    else f"no confirm within {self.opts.publish_timeout_s:g}s")
                        return
                    wake = min(wake, deadline)
                if now >= until:
                    return
                self.conn.process_data_events(time_limit=min(wake - now, 0.05))
        except AMQP_ERRORS as e:
            self._spend(None, self._error_of(e))

    def wait_for_room(self, deadline: float) -> None:
        """Runs I/O until fewer than `window` messages are in flight, the publisher is spent, or
        the monotonic deadline passes."""
        self.drive(deadline, lambda: len(self._pending) < self.opts.window)

    def settle(self, within: float | None = None) -> None:
        """Waits (up to each message's deadline, and at most `within` seconds in all when given:
        a staying publisher's deadline is minutes, too long for the end of a run) for every
        message in flight to complete."""
        end = None if within is None else time.monotonic() + within
        while not self.spent and self._pending:
            until = time.monotonic() + self.opts.publish_timeout_s
            if end is not None:
                if time.monotonic() >= end:
                    return
                until = min(until, end)
            self.drive(until, lambda: not self._pending)

    def publish(self, phase: str = "main") -> str:
        """Publishes one new message and waits for its outcome, up to the deadline.

        Returns "ok", "fail" or "info" (already recorded); with confirms off, "sent" when the
        op was recorded `info` but the channel is fine.
        """
        self.send(phase)
        if not self.opts.confirms and not self.spent:
            return "sent"
        self.settle()
        assert self.last is not None
        return self.last

    def close(self) -> None:
        """Completes what is still in flight `info` and hands the connection to a closer."""
        if self._pending:
            self._spend(None, BLOCKED_ERROR if self.blocked is not None
                        else "publisher closed with the message in flight")
        abandon(self.conn)
        self.conn = None
