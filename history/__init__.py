"""The history: Jepsen's op model, written as JSON lines as operations happen.

This package is the contract every layer shares and depends on nothing of the
project: the harness records into it, workloads and nemeses hand it their ops,
checkers and reports read it. An `Op` is one line of `history.jsonl`
(shared/DESIGN.md fixes the fields). `HistoryWriter` is the one recorder: it
assigns indexes and times under a lock and flushes every line, so a run killed
half-way still leaves a readable history. `Recorder` is what clients are given
(the writer's `append`), so they never hold the file. `read_history` reads a
small history back; the Spark checkers read the file themselves.

Queue ops, beyond Jepsen's: a delivery (f "consume" or "drain") carries
`delivery_count`, the broker's x-delivery-count header (quorum queues set it on
a redelivery; null where absent, and in histories written before it existed),
which tells a first delivery from a redelivery, and `acquired_count`, its
x-acquired-count header (quorum queues on 4.3 count every acquisition there,
where x-delivery-count counts the failed ones only). A publish (its invoke
and its completion) and a delivery carry the message's `priority` property.
Both are written only when set, so a history without them keeps its size
(a line without one reads as null). A message the queue
dead-lettered by design (its max length with overflow drop-head, its delivery
limit) and the harness read back from its own dead-letter queue is one op,
`type "ok"`, `f "dead-letter"` (DEAD_LETTER), with the message's `value`,
`publisher`, `seq`, the reading `process`, `consumer`, `node`, `queue` (the
dead-letter queue), `phase "drain"`, and from the message's x-death header
`reason` ("maxlen", "delivery_limit", "rejected", "expired"), `death_count`
and `death_queue` (the queue it was dead-lettered from). No ack op follows it.
The workload's setup records how the queue dead-letters, when it does, as a
harness observation `f "dead-lettering"` (see workloads.queue_workload).

A consumer that returns a delivery (issue 31: `--reject-share`, `--nack-share`)
records, once basic.reject or basic.nack (both with requeue) is written on an
open channel, an op like the ack: `type "ok"`, `f "reject"` or `f "nack"`,
with the delivery's `value`, `publisher`, `seq`, `consumer`, `process`,
`node`, `queue` and `phase`; no ack follows it. The setup records the queue's
delayed-retry settings, when set, as a harness observation `f
"delayed-retry"` (value: queue, type, min_ms, max_ms, delivery_limit), and
the consumers' x-consumer-timeout, when set, as `f "consumer-timeout"`
(value: queue, timeout_ms, hold_share, hold_s): checkers.retry and
checkers.timeouts judge by them, and judge nothing without them.

A publisher whose connection the broker blocks (AMQP `connection.blocked`: a
memory or disk alarm is in effect somewhere in the cluster) records it as a
harness observation, `type "info"`, `f "blocked"` (BLOCKED), with `node`,
`queue` and the value `{"process", "publisher", "reason"}` (the broker's
reason, e.g. "low on memory"), and `f "unblocked"` (UNBLOCKED) when the broker
lifts it. A publish whose confirm does not come while its connection is
blocked is completed `info` with error "blocked" (BLOCKED_ERROR), never `fail`:
the broker holds it unread and may still take it when the alarm clears.

Metadata probe ops (workloads.metadata_probe, when the spec asks for the probe):
a probe of one node, on a timer, opens a new connection and channel to it (f
"connect"), declares a fresh durable fanout exchange (f "declare"), binds it
to amq.direct (f "bind") and deletes it (f "delete"): PROBE_FS, each an `invoke`
then `ok`, `fail` (the broker refused: `error` is its reply code and text,
"541 INTERNAL_ERROR - ...", and `reply_code` the code; or the node refused the
TCP connection) or `info` (no answer within the probe's timeout, or the
connection was lost: unknown; the probe's process is then retired), with
`node`, `process` (numbers of the run's own sequence, never a queue client's),
`phase` "main", and `value` and `queue` the round's probe exchange name. The probe
records at its start a harness observation `f "metadata-probe"`
(METADATA_PROBE: its nodes, interval, timeout and name prefix), which
tells the checker to judge the probe's ops (checkers.metadata).

How a consumer ends (RabbitMQ keeps a consumer's unacknowledged deliveries
until its channel closes, even after the consumer is cancelled; a single
active consumer's cancel activates the next consumer at once): every way the
harness stops a consumer (the end of the main phase or the drain, a consumer
paused for a fault, a crash the workload plants, a retired process) is
recorded as two ops of its process, each with `consumer`, `node`, `queue` and
`phase`: the harness's `basic.cancel`, `f "cancel"` (CANCEL), `invoke` when
sent, then `ok` on cancel-ok, `info` when the connection broke or no answer
came in time, `fail` when the channel was no longer open (nothing was sent);
then the channel's close, `f "close"` (CLOSE), likewise (`ok` on close-ok: the
broker has the consumer's unacknowledged messages back). Both invocations
carry `by "harness"` and `holding`, the ids the consumer then held (delivered,
not acked). A consumer of a queue with a single active consumer is ended
without a cancel: its channel's close alone, the close ops only, whose outcome
carries `holding` too (what the close gave back: what the consumer held at
the invocation, and any delivery recorded between the invocation and the
outcome, one that reached it while the close was under way); a cancelled
single active consumer keeps what it holds while the next one is activated.
A cancel the broker sent (consumer cancel notification) is one op
`type "ok"`, `f "cancel"`, `by "broker"`; a channel or connection the client
saw closed without its asking (connection lost, heartbeat missed, channel
closed by the broker) is one op `type "info"`, `f "close"`, `by "broker"`,
with the `error`; a channel.close the broker sent also carries its
`reply_code` and `reply_text` and `holding` (RabbitMQ closes a timed-out
consumer's channel with 406 when its client does not advertise
consumer_cancel_notify). Neither carries a `value`. The connection's own close,
after its channel's, is not recorded: by then nothing of the queue's is held.
The moment the runner tells the workers to stop (the main phase's end is
recorded only once they and the nemesis have finished) is a harness
observation, `type "info"`, `f "stop-workers"` (STOP_WORKERS), value
`{"phase": "main"}`.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

OpType = Literal["invoke", "ok", "fail", "info"]

# Processes that are not clients.
NEMESIS = "nemesis"
HARNESS = "harness"
# A message the harness read back from the queue's dead-letter queue.
DEAD_LETTER = "dead-letter"
# The metadata probe's ops, and the harness observation that a probe ran.
PROBE_FS = ("connect", "declare", "bind", "delete")
METADATA_PROBE = "metadata-probe"
# Harness observations of a publisher's connection blocked and unblocked by the broker, and the
# error of a publish left unconfirmed while its connection was blocked.
BLOCKED = "blocked"
UNBLOCKED = "unblocked"
BLOCKED_ERROR = "blocked"
# How a consumer ends: its cancel and its channel's close, and who did it (see above).
CANCEL = "cancel"
CLOSE = "close"
BY_HARNESS = "harness"
BY_BROKER = "broker"
# The client library: pika's cancel rejects (requeue) a manual-ack consumer's deliveries that it
# had not dispatched or that came before the cancel-ok (a reject op's `by`).
BY_PIKA = "pika"
# The harness's observation that it told the workers to stop.
STOP_WORKERS = "stop-workers"
# The harness observation of a run whose publishers give messages priorities: what the
# priority check needs to judge them (workloads.queue_workload.priorities_observation).
PRIORITIES = "priorities"
# The harness observation of a node that would not boot again after the faults, however the
# harness tried to mend it (harness.unbootable): an outcome of the run, with the log lines that
# say why; the drain does without it.
UNRECOVERABLE = "node-unrecoverable"
# The harness observation of a node's unsynced layer settled before the main phase (the runner's
# `settle_layers`, backend.settle_layers): what the sync wrote back, so that a power loss after it
# is known to find none of the setup's writes unsynced.
LAYER_SETTLED = "layer-settled"
# The harness observation of how the workload's clients behave (workloads.queue_workload): the
# queue, its type, single active consumer, which clients stay across faults (`stay`) and the
# confirm deadlines; checkers.settlement judges staying consumers only where it may.
CLIENTS = "clients"


@dataclass(frozen=True)
class Op:
    """One operation of the history. `index` and `time` are set by the writer."""

    type: OpType
    process: int | str
    f: str
    value: Any = None
    node: str | None = None
    index: int = -1
    time: int = -1
    queue: str | None = None
    publisher: int | None = None
    seq: int | None = None
    consumer: str | None = None
    redelivered: bool | None = None
    delivery_count: int | None = None
    phase: str | None = None
    error: str | None = None
    priority: int | None = None
    acquired_count: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_line(self) -> bytes:
        """Returns the op as one UTF-8 JSON line, newline included (orjson: a few times faster
        than json, and the recorder is on every client's hot path)."""
        d = {name: getattr(self, name) for name in _FIELDS}
        for name in _WHEN_SET:
            if d[name] is None:
                del d[name]
        if self.extra:
            d.update(self.extra)
        try:
            return orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # something orjson will not take (a huge int, a non-str key)
            return (json.dumps(d, separators=(",", ":")) + "\n").encode("utf-8")

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Op:
        """Takes a decoded history line. Returns the Op; unknown keys go to `extra`."""
        known = {f for f in Op.__dataclass_fields__ if f != "extra"}
        base = {k: v for k, v in d.items() if k in known}
        extra = {k: v for k, v in d.items() if k not in known}
        return Op(**base, extra=extra)


# The fields of a history line, in order (extra keys follow).
_FIELDS: tuple[str, ...] = tuple(f for f in Op.__dataclass_fields__ if f != "extra")
# Fields written only when set (most runs have none: every line would carry their nulls).
_WHEN_SET: tuple[str, ...] = ("priority", "acquired_count")


class Recorder(Protocol):
    """Where clients and nemeses hand their ops: the controller stamps and writes them."""

    def append(self, op: Op) -> Op:
        """Takes an op without index/time. Returns it stamped, once written."""
        ...


class HistoryWriter:
    """Appends ops to a JSONL file, thread-safe, one flushed line per op.

    Takes the path and an optional monotonic start time (ns). `append` stamps
    `index` (strictly increasing) and `time` (ns since start) and returns the
    stamped op, so callers can pair an invocation with its completion.
    """

    def __init__(self, path: Path, start_ns: int | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        # One unbuffered write per line: on disk (in the page cache) as soon as append returns.
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._index = 0
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns
        # The wall clock at time 0, to line the history up with brokers' log timestamps.
        self.start_unix = time.time() - (time.monotonic_ns() - self.start_ns) / 1e9

    def now(self) -> int:
        """Returns nanoseconds since the history started."""
        return time.monotonic_ns() - self.start_ns

    def append(self, op: Op) -> Op:
        """Takes an op without index/time. Returns it stamped, after writing and flushing it."""
        with self._lock:
            if self._fd is None:
                raise ValueError(f"history {self.path} is closed")
            # A frozen op: stamp a copy of its fields (much faster than dataclasses.replace).
            stamped = object.__new__(Op)
            stamped.__dict__.update(op.__dict__, index=self._index, time=self.now())
            os.write(self._fd, stamped.to_line())
            self._index += 1
            return stamped

    @property
    def count(self) -> int:
        """Returns how many ops were written."""
        return self._index

    def close(self) -> None:
        """Closes the file; later appends raise."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_history(path: Path) -> Iterator[Op]:
    """Takes a history path (`history.jsonl`, or gzip-compressed, `history.jsonl.gz`, as
    archived findings keep it). Yields its ops in file order (blank lines skipped).

    Raises ValueError naming the line for a line that is not a JSON object.
    """
    gz = Path(path).suffix == ".gz"
    with (gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON: {e}") from e
            if not isinstance(d, dict):
                raise ValueError(f"{path}:{lineno}: not a JSON object")
            missing = [k for k in ("type", "process", "f") if k not in d]
            if missing:
                raise ValueError(f"{path}:{lineno}: missing {', '.join(missing)}")
            yield Op.from_dict(d)


def read_history(path: Path) -> list[Op]:
    """Takes a history path. Returns all its ops (small histories only)."""
    return list(iter_history(path))
