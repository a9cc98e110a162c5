"""Literal test histories, written with the harness's own HistoryWriter and Op.

`Builder` writes ops through a `HistoryWriter` whose clock the test sets
(`at`, or 1 ms per op by default), so times are exact and checker results can
be compared whole. Message ids follow the contract: "<publisher>-<seq>".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from history import HARNESS, NEMESIS, HistoryWriter, Op

MS = 1_000_000


class ClockWriter(HistoryWriter):
    """A HistoryWriter with a settable clock (ns); each append moves it on by `step` ns."""

    def __init__(self, path: Path, step: int = MS) -> None:
        super().__init__(path, start_ns=0)
        self.clock = 0
        self.step = step

    def now(self) -> int:
        """Returns the settable clock, then advances it by one step."""
        t = self.clock
        self.clock += self.step
        return t


class Builder:
    """Writes a literal history op by op. Takes the file path; use as a context manager."""

    def __init__(self, path: Path, step: int = MS) -> None:
        self.path = path
        self.w = ClockWriter(path, step)

    def __enter__(self) -> Builder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.w.close()

    def at(self, ms: float) -> Builder:
        """Sets the clock to `ms` milliseconds for the next op."""
        self.w.clock = int(ms * MS)
        return self

    def later(self, ns: int) -> Builder:
        """Moves the clock on by `ns` nanoseconds for the next op (ops stay in time order)."""
        self.w.clock += ns
        return self

    def op(self, **kw: Any) -> Op:
        """Appends an Op built from the keywords. Returns it stamped."""
        return self.w.append(Op(**kw))

    def invoke(self, process: int, seq: int, publisher: int | None = None,
               priority: int | None = None) -> Op:
        """Appends a publish invocation of message "<publisher>-<seq>" by `process`."""
        pub = process if publisher is None else publisher
        return self.op(type="invoke", process=process, f="publish", value=f"{pub}-{seq}",
                       node="n1", queue="q", publisher=pub, seq=seq, phase="main",
                       priority=priority)

    def complete(self, process: int, seq: int, type_: str = "ok",
                 publisher: int | None = None, priority: int | None = None) -> Op:
        """Appends the completion (`ok`, `fail` or `info`) of a publish."""
        pub = process if publisher is None else publisher
        return self.op(type=type_, process=process, f="publish", value=f"{pub}-{seq}",
                       node="n1", queue="q", publisher=pub, seq=seq, phase="main",
                       error=None if type_ == "ok" else "test", priority=priority)

    def publish(self, process: int, seq: int, type_: str = "ok",
                publisher: int | None = None, error: str | None = None,
                priority: int | None = None) -> None:
        """Appends a publish invocation and its completion (`error` overrides the fail/info
        text), both with the message's priority."""
        self.invoke(process, seq, publisher, priority)
        if error is None:
            self.complete(process, seq, type_, publisher, priority)
            return
        pub = process if publisher is None else publisher
        self.op(type=type_, process=process, f="publish", value=f"{pub}-{seq}", node="n1",
                queue="q", publisher=pub, seq=seq, phase="main", error=error)

    def deliver(self, process: int, mid: str, consumer: str | None = None,
                redelivered: bool = False, f: str = "consume", priority: int | None = None,
                acquired_count: int | None = None) -> Op:
        """Appends a delivery of `mid` to consumer `process` (tag defaults to "c<process>")."""
        pub, seq = _parse(mid)
        return self.op(type="ok", process=process, f=f, value=mid, node="n2", queue="q",
                       publisher=pub, seq=seq, consumer=consumer or f"c{process}",
                       redelivered=redelivered, phase="drain" if f == "drain" else "main",
                       priority=priority, acquired_count=acquired_count)

    def ack(self, process: int, mid: str, consumer: str | None = None,
            phase: str = "main") -> Op:
        """Appends the consumer's ack of its latest delivery of `mid` (same tag default)."""
        pub, seq = _parse(mid)
        return self.op(type="ok", process=process, f="ack", value=mid, node="n2", queue="q",
                       publisher=pub, seq=seq, consumer=consumer or f"c{process}", phase=phase)

    def consume(self, process: int, mid: str, consumer: str | None = None,
                redelivered: bool = False, f: str = "consume") -> None:
        """Appends a delivery and its ack, as a consumer acking each delivery records them."""
        self.deliver(process, mid, consumer, redelivered, f)
        self.ack(process, mid, consumer, "drain" if f == "drain" else "main")

    def end(self, process: int, f: str, type_: str, consumer: str | None = None,
            by: str = "harness", error: str | None = None) -> Op:
        """Appends an op of a consumer's end, as workloads.clients records it: f "cancel" or
        "close", no value (tag defaults to "c<process>")."""
        return self.op(type=type_, process=process, f=f, node="n2", queue="q",
                       consumer=consumer or f"c{process}", phase="main", error=error,
                       extra={"by": by} if type_ == "invoke" or by == "broker" else {})

    def cancel(self, process: int) -> None:
        """Appends the harness's cancel of consumer `process`: invoke, then ok."""
        self.end(process, "cancel", "invoke")
        self.end(process, "cancel", "ok")

    def close(self, process: int) -> None:
        """Appends the close of consumer `process`'s channel: invoke, then ok."""
        self.end(process, "close", "invoke")
        self.end(process, "close", "ok")

    def dead_letter(self, process: int, mid: str, reason: str | None = "maxlen",
                    count: int = 1) -> Op:
        """Appends a message read back from the harness's dead-letter queue, as the drain
        records it: f "dead-letter", with the reason, count and queue of its x-death header."""
        pub, seq = _parse(mid)
        return self.op(type="ok", process=process, f="dead-letter", value=mid, node="n1",
                       queue="q.harness-dlq", publisher=pub, seq=seq, consumer=f"d{process}",
                       redelivered=False, phase="drain",
                       extra={"reason": reason, "death_count": count, "death_queue": "q"})

    def dead_lettering(self, by: str = "harness", limits: tuple[str, ...] = (
            "max length 5 (drop-head)",)) -> None:
        """Appends the harness's observation of where the queue dead-letters."""
        self.op(type="info", process=HARNESS, f="dead-lettering",
                value={"queue": "q", "exchange": "q.harness-dlx" if by == "harness" else "mine",
                       "dead_letter_queue": "q.harness-dlq" if by == "harness" else None,
                       "by": by, "limits": list(limits)})

    def priorities(self, line: str | None = "4.3", levels: int | None = 32, strict: bool = True,
                   consume: int = 1, drain: int = 200, sac: bool = False) -> None:
        """Appends the harness's observation of a run whose publishers give priorities
        (workloads.queue_workload.priorities_observation), for queue "q"."""
        self.op(type="info", process=HARNESS, f="priorities",
                value={"queue": "q", "type": "quorum", "version": line and f"{line}.0",
                       "line": line, "levels": levels, "strict": strict,
                       "prefetch": {"consume": consume, "drain": drain},
                       "single_active_consumer": sac, "distribution": "none,1,9"})

    def nemesis(self, f: str, value: Any = None, node: str | None = None) -> None:
        """Appends a nemesis invoke and its info completion."""
        self.op(type="invoke", process=NEMESIS, f=f, value={"fault": f}, node=node)
        self.op(type="info", process=NEMESIS, f=f, value=value if value is not None else {},
                node=node)

    def phase(self, name: str, state: str) -> None:
        """Appends a harness phase event."""
        self.op(type="info", process=HARNESS, f="phase", value={"phase": name, "state": state})

    def drained(self) -> None:
        """Appends the drain phase's start and end events."""
        self.phase("drain", "start")
        self.phase("drain", "end")

    def drain_end(self, state: str = "end", complete: bool | None = None,
                  reason: str | None = None) -> None:
        """Appends a drain start and an end event as the runner writes them: with `complete` and
        `reason` when given."""
        self.phase("drain", "start")
        value: dict[str, Any] = {"phase": "drain", "state": state}
        if complete is not None:
            value["complete"] = complete
        if reason is not None:
            value["reason"] = reason
        self.op(type="info", process=HARNESS, f="phase", value=value)


def _parse(mid: str) -> tuple[int | None, int | None]:
    parts = mid.split("-")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    return None, None


def write_lines(path: Path, lines: list[str]) -> Path:
    """Writes raw lines (for malformed histories). Returns the path."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
