"""The metadata probe: does each node still serve metadata (connections, declarations) now?

RabbitMQ's metadata (queues, exchanges, bindings, users, vhosts) lives in its
metadata store. Khepri, the only store of 4.3 and an option of 4.0, is a Raft
store: a node cut off with a minority of the cluster cannot change metadata
(declaring times out: the client sees its connection closed with 541
INTERNAL_ERROR, or no answer at all within its own timeout), while reads of
local, possibly stale, metadata (authentication, the vhost) may still serve a
new connection. The queue workload's clients stay connected through a fault and
show what happens to an existing queue; the probe shows what happens to
metadata.

One `NodeProbe` per node runs on a timer (`interval_s`, start to start): a
round opens a new connection and channel to its node (f "connect"), declares a
fresh durable fanout exchange with a unique name, "harness-probe-<node>-<round>"
(f "declare"), binds it to amq.direct (f "bind", an exchange-to-exchange
binding) and deletes it (f "delete"), each op recorded (the exchange's name in
the op's `queue` field, the history's entity name) as `invoke` then:

- `ok`: the broker answered it;
- `fail`: the broker refused it, with its reply code and text in `error`
  ("541 INTERNAL_ERROR - ...") and the code in `reply_code` (a channel closed
  by the broker, or the connection closed by the broker with anything but 320
  CONNECTION_FORCED, the node going away; a refused login), or the node
  refused the TCP connection. A 541 after Khepri's own timeout is taken at the
  broker's word, although the command may still be applied once the node
  rejoins: the queue is then a leftover (below);
- `info`: no answer within `timeout_s` (`workloads.clients.answer_within` cuts
  the connection), the connection lost, anything unexpected: unknown. The
  probe's process is then retired and the next round takes a new number.

A round ends at its first op that is not `ok` (the connection is then handed to
`abandon`), or when the probe is told to stop. Process numbers come from the
run's own sequence (the queue workload's `ProcessIds`), so they are never a
queue client's. The probe records a harness observation f "metadata-probe" when
it starts (its nodes, interval, timeout, queue name prefix and exchange), which
tells the checker to judge its ops (checkers.metadata).

Exchanges, not queues: they are metadata only, as RabbitMQ's own Khepri guide
shows a minority's declaration timing out ("operation exchange.declare caused a
connection exception internal_error: ... because the operation timed out"). A
quorum queue's declaration also waits for its members to start on every node,
so while one node is cut off it stalls on the majority's side too (the first
real 4.3 run of khepri-minority: 3 of 4 quorum-queue declarations through the
majority's nodes unanswered in 5 s), which says nothing of the metadata store.

Leftover probe exchanges: a round's exchange is deleted by the round itself;
every exchange whose delete did not succeed is remembered (its declare may have
taken effect even when refused or unanswered), and `cleanup` (run after the
drain) deletes each through any node that answers (exchange.delete of an
exchange that does not exist succeeds). What it cannot delete lives until the
teardown destroys the cluster, and harms nothing the run judges: nothing is
bound to a probe exchange, and the main queue's routing does not pass it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pika.exceptions
from pika.adapters.utils.connection_workflow import AMQPConnectorException

from clusters.base import Node
from history import HARNESS, METADATA_PROBE, Op, OpType, Recorder
from workloads.clients import (
    AMQP_ERRORS,
    ClientError,
    ClientOptions,
    ProcessIds,
    abandon,
    answer_within,
    connect,
    join_threads,
)

log = logging.getLogger(__name__)

PREFIX = "harness-probe-"
EXCHANGE = "amq.direct"
# The connection-level close of a node going away (shutdown, maintenance): not a refusal of
# the op in hand, whose fate is then unknown.
CONNECTION_FORCED = 320
# pika's text of a refused login: "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - ...'".
_CODED = re.compile(r"\((\d{3})\) '(.*)'", re.S)
_REFUSALS: tuple[type[BaseException], ...] = (
    pika.exceptions.AuthenticationError,
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
)
# Past this many characters an error is cut (as the queue workload's are).
ERROR_CHARS = 300


def outcome_of(e: BaseException) -> tuple[OpType, str, int | None]:
    """Takes the exception an op raised. Returns (type, error, reply_code): `fail` with the
    broker's code and text for a refusal (a channel or connection the broker closed, but for
    320 CONNECTION_FORCED; a refused login) or for a refused TCP connection, else `info`."""
    if isinstance(e, pika.exceptions.ChannelClosedByBroker | pika.exceptions.ConnectionClosedByBroker) \
            and e.reply_code != CONNECTION_FORCED:
        return "fail", f"{e.reply_code} {e.reply_text}"[:ERROR_CHARS], e.reply_code
    if isinstance(e, _REFUSALS):
        m = _CODED.search(str(e))
        if m:
            return "fail", f"{m.group(1)} {m.group(2)}"[:ERROR_CHARS], int(m.group(1))
        return "fail", f"{type(e).__name__}: {e}"[:ERROR_CHARS], None
    if _tcp_refused(e):
        return "fail", "connection refused", None
    return "info", f"{type(e).__name__}: {e}"[:ERROR_CHARS], None


def _tcp_refused(e: BaseException) -> bool:
    """Returns whether pika's connection error wraps a refused TCP connection."""
    if isinstance(e, ConnectionRefusedError):
        return True
    return isinstance(e, pika.exceptions.AMQPConnectionError) and any(
        isinstance(getattr(a, "exception", None), ConnectionRefusedError) for a in e.args)


@dataclass(frozen=True)
class ProbeSettings:
    """How the probe runs: seconds between rounds (start to start), each op's timeout, and the
    client settings it connects with (port, heartbeat)."""

    interval_s: float = 1.0
    timeout_s: float = 5.0
    client: ClientOptions = dataclasses.field(default_factory=ClientOptions)

    @property
    def connection(self) -> ClientOptions:
        """Returns the client options of a probe's connection: its own timeouts."""
        return dataclasses.replace(self.client, connect_timeout_s=self.timeout_s,
                                   answer_timeout_s=self.timeout_s)


class Leftovers:
    """The probe exchanges that may exist: declared (or maybe declared) and not deleted yet."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}  # exchange name -> node it was declared through
        self._lock = threading.Lock()

    def add(self, name: str, node: str) -> None:
        """Remembers an exchange that may exist."""
        with self._lock:
            self._names[name] = node

    def discard(self, name: str) -> None:
        """Forgets an exchange that certainly does not exist."""
        with self._lock:
            self._names.pop(name, None)

    def names(self) -> list[str]:
        """Returns the exchanges that may exist, in the order they were added."""
        with self._lock:
            return list(self._names)


class NodeProbe:
    """One node's probe: rounds of connect, declare, bind, delete, each op recorded.

    Takes the recorder, the node, the run's process numbers, the settings and where to
    remember leftover queues.
    """

    def __init__(self, history: Recorder, node: Node, pids: ProcessIds,
                 settings: ProbeSettings, leftovers: Leftovers) -> None:
        self.history = history
        self.node = node
        self.pids = pids
        self.settings = settings
        self.leftovers = leftovers
        self.process = pids.next()
        self.rounds = 0

    def _op(self, f: str, name: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        """Records the invocation of `f`, runs `call`, records its outcome (module docstring).
        Returns (whether it was ok, what the call returned)."""
        base = Op(type="invoke", process=self.process, f=f, value=name, node=self.node.name,
                  queue=name, phase="main")
        self.history.append(base)
        try:
            out = call()
        except Exception as e:  # never a crash: whatever it was, the op's outcome is recorded
            type_, error, code = outcome_of(e)
            self.history.append(dataclasses.replace(
                base, type=type_, error=error,
                extra={} if code is None else {"reply_code": code}))
            if type_ == "info":
                self.process = self.pids.next()  # unknown: the process is retired
            return False, None
        self.history.append(dataclasses.replace(base, type="ok"))
        return True, out

    def _connect(self, name: str) -> Any:
        opts = self.settings.connection

        def call() -> Any:
            try:
                conn = connect(self.node.ip, opts)
            except ClientError as e:
                raise e.__cause__ or e from None
            try:
                with answer_within(conn, self.settings.timeout_s, "channel.open"):
                    return conn, conn.channel()
            except BaseException:
                abandon(conn, self.settings.timeout_s)
                raise

        return self._op("connect", name, call)

    def round(self, stop: threading.Event | None = None) -> None:
        """Runs one round (connect, declare, bind, delete), ending at its first op that is not
        ok or once `stop` is set; hands the connection to a background closer."""
        self.rounds += 1
        name = f"{PREFIX}{self.node.name}-{self.rounds}"
        ok, opened = self._connect(name)
        if not ok:
            return
        conn, ch = opened
        timeout = self.settings.timeout_s
        steps: list[tuple[str, str, Callable[[], Any]]] = [
            ("declare", "exchange.declare", lambda: ch.exchange_declare(
                name, exchange_type="fanout", durable=True)),
            ("bind", "exchange.bind", lambda: ch.exchange_bind(name, EXCHANGE, routing_key=name)),
            ("delete", "exchange.delete", lambda: ch.exchange_delete(name)),
        ]
        try:
            for f, what, request in steps:
                if stop is not None and stop.is_set():
                    return
                if f == "declare":
                    self.leftovers.add(name, self.node.name)

                def bounded(request: Callable[[], Any] = request, what: str = what) -> Any:
                    with answer_within(conn, timeout, what):
                        return request()

                ok, _ = self._op(f, name, bounded)
                if f == "delete" and ok:
                    self.leftovers.discard(name)
                if not ok:
                    return
        finally:
            abandon(conn, timeout)

    def run(self, stop: threading.Event) -> None:
        """Runs rounds every `interval_s` (start to start) until `stop` is set."""
        while not stop.is_set():
            began = time.monotonic()
            self.round(stop)
            stop.wait(max(0.0, self.settings.interval_s - (time.monotonic() - began)))


class MetadataProbe:
    """A probe of every node (`NodeProbe`), started and stopped beside the queue workload.

    Takes the nodes, the recorder, the settings and the run's process numbers (the queue
    workload's, so that no number is used twice).
    """

    def __init__(self, nodes: Sequence[Node], history: Recorder, settings: ProbeSettings,
                 pids: ProcessIds) -> None:
        self.nodes = tuple(nodes)
        self.history = history
        self.settings = settings
        self.leftovers = Leftovers()
        self.probes = [NodeProbe(history, n, pids, settings, self.leftovers) for n in self.nodes]
        self._threads: list[threading.Thread] = []

    def start(self, stop: threading.Event) -> None:
        """Records the harness observation of the probe, then starts one thread per node; they
        run until `stop` is set."""
        self.history.append(Op(type="info", process=HARNESS, f=METADATA_PROBE, value={
            "nodes": [n.name for n in self.nodes], "interval_s": self.settings.interval_s,
            "timeout_s": self.settings.timeout_s, "queue_prefix": PREFIX,
            "exchange": EXCHANGE}))
        for p in self.probes:
            t = threading.Thread(target=p.run, args=(stop,), name=f"probe-{p.node.name}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def join(self, timeout: float = 30.0) -> None:
        """Waits for the probes to finish their round (after `stop` was set)."""
        join_threads(self._threads, timeout, "metadata probe")

    def cleanup(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Deletes the leftover probe exchanges through the first node that answers, within about
        `timeout_s`. Never raises. Returns what it did, for test.json: {"leftovers",
        "deleted", "left" (names it could not delete), "error" (why, or None)}."""
        names = self.leftovers.names()
        out: dict[str, Any] = {"leftovers": len(names), "deleted": 0, "left": [],
                               "error": None}
        deadline = time.monotonic() + timeout_s
        errors: list[str] = []
        for node in self.nodes:
            if not names or time.monotonic() > deadline:
                break
            try:
                self._delete_all(node, names, deadline)
            except (ClientError, AMQPConnectorException, *AMQP_ERRORS) as e:
                errors.append(f"{node.name}: {type(e).__name__}: {e}"[:ERROR_CHARS])
            names = self.leftovers.names()
        out["deleted"] = out["leftovers"] - len(names)
        out["left"] = names
        out["error"] = "; ".join(errors) or None
        if names:
            log.warning("%d probe exchange(s) left until the teardown: %s", len(names),
                        ", ".join(names[:10]))
        return out

    def _delete_all(self, node: Node, names: Sequence[str], deadline: float) -> None:
        """Deletes `names` through `node` until the deadline, forgetting each deleted; raises
        what a connection or a delete raised."""
        conn = connect(node.ip, self.settings.connection)
        try:
            ch = None
            for name in names:
                if time.monotonic() > deadline:
                    return
                with answer_within(conn, self.settings.timeout_s, "exchange.delete"):
                    if ch is None:
                        ch = conn.channel()
                    ch.exchange_delete(name)
                self.leftovers.discard(name)
        finally:
            abandon(conn, self.settings.timeout_s)
