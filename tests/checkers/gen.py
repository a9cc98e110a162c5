"""Hypothesis strategies: histories of a correct queue, and anomalies planted in them.

`correct_histories` simulates a FIFO queue with several publishers and
consumers: publishes end ok (enqueued), fail (not enqueued) or info (enqueued
or not, the publisher's process retires); a consumer may hold deliveries
unacked and die, its messages going back to the head of the queue flagged
redelivered; the nemesis starts and stops faults; a drain after the main
phase takes what is left. With `sac=True` one consumer at a time takes
messages with prefetch 1, so even redeliveries keep the queue's FIFO order
(the strict ordering check), except where the harness cancels the active
consumer (when acks are recorded): the next consumer is active at once and
may take later messages while the cancelled one's unacked message stays out
of the queue until its channel's close (recorded, as the harness does, as f
"cancel" and f "close" ops), then comes back first, flagged (a held reorder,
never a violation). Each history draws two format choices: whether
consumers record their acks (an `ack` op when a delivery is acked; without
them every delivery counts as acked), and whether publishers are stable slots
(`publisher` a slot whose seq continues when its process retires and another
takes over) or, as in older runs, the process itself.

The model knows the truth (`Expected`); `plant` changes a history and the
truth together: drop a confirmed message's deliveries (lost), drop its ack
(lost, unacked), deliver one again with or without the flag (to a new
consumer, or unflagged to the same consumer right after itself), deliver it
flagged and acked then unflagged again (unflagged after ack), deliver an id
never published, deliver an info or a failed publish, swap two adjacent
deliveries of one stream; have the queue drop a confirmed message by design
(its deliveries replaced by a dead letter the drain read back: dropped, not
lost), or dead-letter a message it also delivered (delivered).
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from history import HARNESS, NEMESIS, Op
from tests.checkers.histories import ClockWriter

MS = 1_000_000
PLANTS = ("drop", "dup_unflagged", "dup_flagged", "dup_same_consumer", "unexpected",
          "deliver_info", "deliver_failed", "swap", "unacked", "unflagged_after_ack",
          "dead_letter", "dead_letter_delivered")
REASONS = ("maxlen", "delivery_limit", "expired", "rejected")


@dataclass
class Expected:
    """What a correct checker must report for a generated history."""

    lost: set[str] = field(default_factory=set)
    lost_unacked: set[str] = field(default_factory=set)
    unexpected: set[str] = field(default_factory=set)
    redelivered_duplicated: set[str] = field(default_factory=set)
    unflagged_duplicated: set[str] = field(default_factory=set)
    unflagged_after_ack: set[str] = field(default_factory=set)
    recovered: set[str] = field(default_factory=set)
    delivered_failed: set[str] = field(default_factory=set)
    dropped_by_design: dict[str, str] = field(default_factory=dict)  # id -> reason
    dead_lettered_delivered: set[str] = field(default_factory=set)
    violations: int = 0
    affected: set[str] = field(default_factory=set)

    @property
    def duplicated(self) -> set[str]:
        """Returns every duplicated id."""
        return self.redelivered_duplicated | self.unflagged_duplicated


@dataclass
class Generated:
    """A generated history: ops (Op keywords with a time), the publish outcomes, who published
    each message, whether acks are recorded, and the truth."""

    ops: list[tuple[int, dict[str, Any]]]
    outcomes: dict[str, str]
    publish_process: dict[str, int]
    expected: Expected
    sac: bool
    acks: bool
    next_process: int
    planted: list[str] = field(default_factory=list)

    def write(self, path: Path) -> Path:
        """Writes the history with the harness's HistoryWriter. Returns the path."""
        w = ClockWriter(path, step=0)
        with w:
            for t, kw in self.ops:
                w.clock = t
                w.append(Op(**kw))
        return path

    def deliveries(self) -> Counter[str]:
        """Returns how often each id is delivered."""
        return Counter(kw["value"] for _, kw in self.ops if _is_delivery(kw))

    def consumed(self) -> Counter[str]:
        """Returns how often each id was consumed: acked, or delivered when acks are not recorded."""
        if not self.acks:
            return self.deliveries()
        return Counter(kw["value"] for _, kw in self.ops if _is_ack(kw))

    def once(self, used: set[str]) -> list[str]:
        """Returns the ids not planted on yet that were delivered exactly once and consumed."""
        counts, consumed = self.deliveries(), self.consumed()
        return sorted(m for m, n in counts.items() if n == 1 and consumed[m] == 1 and m not in used)


def _is_delivery(kw: dict[str, Any]) -> bool:
    return kw["f"] in ("consume", "drain") and kw["type"] == "ok"


def _is_ack(kw: dict[str, Any]) -> bool:
    return kw["f"] == "ack" and kw["type"] == "ok"


def _delivery(process: int, mid: str, redelivered: bool, f: str = "consume") -> dict[str, Any]:
    pub, seq = (int(x) for x in mid.split("-"))
    return dict(type="ok", process=process, f=f, value=mid, node="n2", queue="q",
                publisher=pub, seq=seq, consumer=f"{f}-{process}", redelivered=redelivered,
                phase="drain" if f == "drain" else "main")


def _ack(delivery: dict[str, Any]) -> dict[str, Any]:
    keep = ("process", "value", "node", "queue", "publisher", "seq", "consumer", "phase")
    return dict(type="ok", f="ack", **{k: delivery[k] for k in keep})


class _Sim:
    """The queue model, driven by hypothesis draws."""

    def __init__(self, draw: Any, sac: bool, acks: bool, slots: bool) -> None:
        self.draw = draw
        self.sac = sac
        self.acks = acks
        self.slots = slots
        self.t = 0
        self.ops: list[tuple[int, dict[str, Any]]] = []
        self.next_proc = 1
        n_pub = draw(st.integers(1, 3))
        # A publisher id and the process publishing for it now (the same number, without slots).
        self.publishers = list(range(101, 101 + n_pub)) if slots else [
            self.proc() for _ in range(n_pub)]
        self.process_of = {p: (self.proc() if slots else p) for p in self.publishers}
        self.seqs: dict[int, int] = {}
        n_cons = 1 if sac else draw(st.integers(1, 3))
        self.consumers = [self.proc() for _ in range(n_cons)]
        self.unacked: dict[int, list[dict[str, Any]]] = {c: [] for c in self.consumers}
        self.queue: deque[tuple[str, bool]] = deque()
        self.outcomes: dict[str, str] = {}
        self.publish_process: dict[str, int] = {}
        self.enqueued_info: set[str] = set()
        self.fault: str | None = None
        # A consumer the harness cancelled whose channel is not closed yet (single active
        # consumer): its unacked messages stay out of the queue until then.
        self.cancelled: int | None = None

    def proc(self) -> int:
        p = self.next_proc
        self.next_proc += 1
        return p

    def emit(self, **kw: Any) -> None:
        self.t += self.draw(st.integers(0, 5)) * MS
        self.ops.append((self.t, kw))

    def acked(self, delivery: dict[str, Any]) -> None:
        if self.acks:
            self.ops.append((self.t, _ack(delivery)))

    def publish(self) -> None:
        i = self.draw(st.integers(0, len(self.publishers) - 1))
        pub = self.publishers[i]
        p = self.process_of[pub]
        seq = self.seqs.get(pub, 0)
        self.seqs[pub] = seq + 1
        mid = f"{pub}-{seq}"
        common = dict(process=p, f="publish", value=mid, node="n1", queue="q", publisher=pub,
                      seq=seq, phase="main")
        self.emit(type="invoke", **common)
        outcome = self.draw(st.sampled_from(["ok", "ok", "ok", "fail", "info"]))
        self.emit(type=outcome, error=None if outcome == "ok" else "x", **common)
        self.outcomes[mid] = outcome
        self.publish_process[mid] = p
        if outcome == "ok" or (outcome == "info" and self.draw(st.booleans())):
            self.queue.append((mid, False))
            if outcome == "info":
                self.enqueued_info.add(mid)
        if outcome == "info":  # the process retires; the slot goes on, or a new publisher starts
            new = self.proc()
            if self.slots:
                self.process_of[pub] = new
            else:
                self.publishers[i] = new
                self.process_of[new] = new

    def deliver(self) -> None:
        if not self.queue:
            return
        c = self.consumers[0] if self.sac else self.draw(st.sampled_from(self.consumers))
        held = self.unacked[c]
        if held and (self.sac or len(held) >= 2):
            self.acked(held.pop(0))  # acked before the next delivery (prefetch)
        mid, flag = self.queue.popleft()
        d = _delivery(c, mid, flag)
        self.emit(**d)
        if self.draw(st.booleans()):
            held.append(d)
        else:
            self.acked(d)

    def requeue(self, c: int) -> None:
        # Returned messages go back ahead of the others, behind those returned before them (a
        # quorum queue's returns, in the order they came back).
        front = 0
        while front < len(self.queue) and self.queue[front][1]:
            front += 1
        for d in reversed(self.unacked.pop(c)):
            self.queue.insert(front, (d["value"], True))

    def die(self) -> None:
        holding = [c for c in self.consumers if self.unacked[c]]
        if not holding:
            return
        c = self.draw(st.sampled_from(holding))
        self.requeue(c)
        new = self.proc()
        self.consumers[self.consumers.index(c)] = new
        self.unacked[new] = []

    def _end_op(self, c: int, f: str, type_: str) -> None:
        self.emit(type=type_, process=c, f=f, node="n2", queue="q", consumer=f"consume-{c}",
                  phase="main", extra={"by": "harness"} if type_ == "invoke" else {})

    def cancel(self) -> None:
        """Single active consumer, acks recorded: the harness cancels the active consumer while
        it holds a message; the next one is active at once (`close` returns the held one)."""
        c = self.consumers[0]
        if not (self.sac and self.acks) or self.cancelled is not None or not self.unacked[c]:
            return
        self._end_op(c, "cancel", "invoke")
        self._end_op(c, "cancel", "ok")
        new = self.proc()
        self.consumers[0] = new
        self.unacked[new] = []
        self.cancelled = c

    def close(self) -> None:
        """Closes the cancelled consumer's channel: its unacked messages go back first."""
        c = self.cancelled
        if c is None:
            return
        self._end_op(c, "close", "invoke")
        self._end_op(c, "close", "ok")
        self.requeue(c)
        self.cancelled = None

    def nemesis(self) -> None:
        if self.fault is None:
            f = self.draw(st.sampled_from(["start-partition", "kill", "pause"]))
            value = {"nodes": [self.draw(st.sampled_from(["n1", "n2", "n3"]))]}
            self.emit(type="invoke", process=NEMESIS, f=f, value={"fault": f})
            self.emit(type="info", process=NEMESIS, f=f, value=value)
            self.fault = f
        else:
            stop = {"start-partition": "stop-partition", "kill": "start", "pause": "resume"}
            f = stop[self.fault]
            self.emit(type="invoke", process=NEMESIS, f=f, value={"fault": self.fault})
            self.emit(type="info", process=NEMESIS, f=f, value={})
            self.fault = None

    def phase(self, name: str, state: str) -> None:
        self.emit(type="info", process=HARNESS, f="phase", value={"phase": name, "state": state})

    def finish(self) -> None:
        self.emit(type="info", process=HARNESS, f="stop-workers", value={"phase": "main"})
        self.close()
        self.phase("main", "end")
        self.emit(type="invoke", process=NEMESIS, f="heal", value={})
        self.emit(type="info", process=NEMESIS, f="heal", value={"healed": True})
        for c in list(self.unacked):
            self.requeue(c)
        self.phase("drain", "start")
        drainer = self.proc()
        while self.queue:
            mid, flag = self.queue.popleft()
            d = _delivery(drainer, mid, flag, f="drain")
            self.emit(**d)
            self.acked(d)
        self.phase("drain", "end")


@st.composite
def correct_histories(draw: Any, sac: bool | None = None, acks: bool | None = None,
                      min_steps: int = 10, max_steps: int = 60) -> Generated:
    """Returns a Generated history of a correct queue (see the module docstring)."""
    sim = _Sim(draw, draw(st.booleans()) if sac is None else sac,
               draw(st.booleans()) if acks is None else acks, draw(st.booleans()))
    sim.phase("main", "start")
    actions = {"publish": sim.publish, "deliver": sim.deliver, "die": sim.die,
               "nemesis": sim.nemesis, "cancel": sim.cancel, "close": sim.close}
    steps = draw(st.lists(st.sampled_from(["publish", "publish", "deliver", "deliver", "die",
                                           "nemesis", "cancel", "close"]), min_size=min_steps,
                           max_size=max_steps))
    for a in steps:
        actions[a]()
    sim.finish()
    g = Generated(sim.ops, sim.outcomes, sim.publish_process, Expected(), sim.sac, sim.acks,
                  sim.next_proc)
    consumed = g.consumed()
    g.expected.recovered = {m for m in sim.enqueued_info if consumed[m]}
    g.expected.redelivered_duplicated = {m for m, n in consumed.items() if n > 1}
    return g


def _insert_before_drain_end(g: Generated, *kws: dict[str, Any]) -> None:
    t, _ = g.ops[-1]
    for kw in kws:
        g.ops.insert(len(g.ops) - 1, (t, kw))


def _consume(g: Generated, process: int, mid: str, redelivered: bool) -> list[dict[str, Any]]:
    """Returns a drain delivery of `mid` to `process`, and its ack when acks are recorded."""
    d = _delivery(process, mid, redelivered, "drain")
    return [d, _ack(d)] if g.acks else [d]


def _dead_letter(g: Generated, mid: str, reason: str) -> dict[str, Any]:
    """Returns the drain's record of `mid` read back from the harness's dead-letter queue."""
    pub, seq = (int(x) for x in mid.split("-"))
    p = _fresh(g)
    return dict(type="ok", process=p, f="dead-letter", value=mid, node="n1",
                queue="q.harness-dlq", publisher=pub, seq=seq, consumer=f"dead-letter-{p}",
                redelivered=False, phase="drain",
                extra={"reason": reason, "death_count": 1, "death_queue": "q"})


def _fresh(g: Generated) -> int:
    p = g.next_process
    g.next_process += 1
    return p


def _flagged(g: Generated, mid: str) -> bool:
    return any(_is_delivery(kw) and kw["value"] == mid and kw["redelivered"] for _, kw in g.ops)


def plant(g: Generated, kind: str, draw: Any, used: set[str]) -> bool:
    """Takes a history, a plant kind, hypothesis' draw and ids already planted on. Changes the
    history and its truth. Returns False when the history has nothing to plant on."""
    planted = _PLANTERS[kind](g, kind, draw, used)
    if not planted:
        return False
    used.update(planted)
    g.planted.append(kind)
    return True


# A planter takes a history, the plant kind, hypothesis' draw and the ids already planted on;
# it changes the history and its truth and returns the ids it planted on (none: nothing to
# plant on, the history unchanged).
Planter = Callable[[Generated, str, Any, set[str]], tuple[str, ...]]


def _ok_delivered(g: Generated, used: set[str]) -> list[str]:
    """Returns the confirmed ids not planted on yet that were delivered, in order; after an
    unacked plant, none whose acks are all the acks left (a history without any ack reads
    every delivery as acked: the unacked message would no longer be lost)."""
    counts, consumed = g.deliveries(), g.consumed()
    left = sum(consumed.values())
    return sorted(m for m, o in g.outcomes.items() if o == "ok" and counts[m] and m not in used
                  and (not g.expected.lost_unacked or left > consumed[m]))


def _drop_deliveries(g: Generated, mid: str) -> None:
    """Removes every delivery of `mid` and its acks."""
    g.ops = [(t, kw) for t, kw in g.ops
             if not ((_is_delivery(kw) or _is_ack(kw)) and kw["value"] == mid)]


def _plant_drop(g: Generated, kind: str, draw: Any, used: set[str]) -> tuple[str, ...]:
    """Drops a confirmed message's deliveries: lost."""
    cands = _ok_delivered(g, used)
    if not cands:
        return ()
    mid = draw(st.sampled_from(cands))
    _drop_deliveries(g, mid)
    g.expected.lost.add(mid)
    g.expected.redelivered_duplicated.discard(mid)
    return (mid,)


def _plant_unacked(g: Generated, kind: str, draw: Any, used: set[str]) -> tuple[str, ...]:
    """Drops a confirmed message's only ack: lost, and lost unacked."""
    # Another ack must remain: a history without any reads every delivery as acked.
    cands = [m for m in g.once(used) if g.outcomes.get(m) == "ok"] if g.acks else []
    if not cands or sum(g.consumed().values()) < 2:
        return ()
    mid = draw(st.sampled_from(cands))
    g.ops = [(t, kw) for t, kw in g.ops if not (_is_ack(kw) and kw["value"] == mid)]
    g.expected.lost.add(mid)
    g.expected.lost_unacked.add(mid)
    return (mid,)


def _plant_dup(g: Generated, kind: str, draw: Any, used: set[str]) -> tuple[str, ...]:
    """Delivers a message once more to a new consumer, flagged (dup_flagged) or not: a
    redelivered or an unflagged duplicate (and unflagged after ack when it was flagged
    before)."""
    once = g.once(used)
    if not once:
        return ()
    mid = draw(st.sampled_from(once))
    _insert_before_drain_end(g, *_consume(g, _fresh(g), mid, kind == "dup_flagged"))
    e = g.expected
    if kind == "dup_flagged":
        e.redelivered_duplicated.add(mid)
    else:
        e.unflagged_duplicated.add(mid)
        if _flagged(g, mid):
            e.unflagged_after_ack.add(mid)
    return (mid,)


def _plant_unflagged_after_ack(g: Generated, kind: str, draw: Any,
                               used: set[str]) -> tuple[str, ...]:
    """Delivers a message again flagged and acked, then unflagged: the quorum-ignore
    pattern."""
    once = g.once(used)
    if not once:
        return ()
    mid = draw(st.sampled_from(once))
    _insert_before_drain_end(g, *_consume(g, _fresh(g), mid, True),
                             *_consume(g, _fresh(g), mid, False))
    g.expected.unflagged_duplicated.add(mid)
    g.expected.unflagged_after_ack.add(mid)
    return (mid,)


def _plant_unexpected(g: Generated, kind: str, draw: Any, used: set[str]) -> tuple[str, ...]:
    """Delivers an id never published: unexpected."""
    mid = "999-0"
    if mid in used:
        return ()
    _insert_before_drain_end(g, *_consume(g, _fresh(g), mid, False))
    g.expected.unexpected.add(mid)
    return (mid,)


def _plant_deliver_outcome(g: Generated, kind: str, draw: Any,
                           used: set[str]) -> tuple[str, ...]:
    """Delivers a message whose publish ended info (deliver_info: recovered) or failed
    (deliver_failed: delivered failed), never delivered before."""
    outcome = "info" if kind == "deliver_info" else "fail"
    counts = g.deliveries()
    cands = sorted(m for m, o in g.outcomes.items()
                   if o == outcome and not counts[m] and m not in used)
    if not cands:
        return ()
    mid = draw(st.sampled_from(cands))
    _insert_before_drain_end(g, *_consume(g, _fresh(g), mid, False))
    (g.expected.recovered if outcome == "info" else g.expected.delivered_failed).add(mid)
    return (mid,)


def _plant_dead_letter(g: Generated, kind: str, draw: Any, used: set[str]) -> tuple[str, ...]:
    """Has the queue drop a confirmed message by design: its deliveries replaced by a dead
    letter the drain read back (dropped, not lost)."""
    cands = _ok_delivered(g, used)
    if not cands:
        return ()
    mid, reason = draw(st.sampled_from(cands)), draw(st.sampled_from(REASONS))
    _drop_deliveries(g, mid)
    _insert_before_drain_end(g, _dead_letter(g, mid, reason))
    g.expected.dropped_by_design[mid] = reason
    g.expected.redelivered_duplicated.discard(mid)
    return (mid,)


def _plant_dead_letter_delivered(g: Generated, kind: str, draw: Any,
                                 used: set[str]) -> tuple[str, ...]:
    """Dead-letters a message the queue also delivered: dead-lettered and delivered."""
    once = g.once(used)
    if not once:
        return ()
    mid = draw(st.sampled_from(once))
    _insert_before_drain_end(g, _dead_letter(g, mid, draw(st.sampled_from(REASONS))))
    g.expected.dead_lettered_delivered.add(mid)
    return (mid,)


def _ack_at(g: Generated, i: int) -> int | None:
    """Takes the position of a delivery. Returns the position of its ack when that is the next
    op of the delivery's process (no other delivery to it in between), else None."""
    kw = g.ops[i][1]
    for j in range(i + 1, len(g.ops)):
        other = g.ops[j][1]
        if other.get("process") == kw["process"]:
            return j if _is_ack(other) and other["value"] == kw["value"] else None
    return None


def _plant_dup_same_consumer(g: Generated, kind: str, draw: Any,
                             used: set[str]) -> tuple[str, ...]:
    """Delivers a message again, unflagged, right after itself (and its ack): a duplicate and
    an ordering violation."""
    once = g.once(used)
    at = []
    for i, (_, kw) in enumerate(g.ops):
        if _is_delivery(kw) and kw["value"] in once:
            j = _ack_at(g, i) if g.acks else i
            if j is not None:
                at.append((i, j))
    if not at:
        return ()
    i, j = draw(st.sampled_from(at))
    t, kw = g.ops[i]
    copy_ = {**kw, "redelivered": False}
    g.ops[j + 1:j + 1] = [(t, copy_), *([(t, _ack(copy_))] if g.acks else [])]
    mid = kw["value"]
    e = g.expected
    e.unflagged_duplicated.add(mid)
    if kw["redelivered"]:
        e.unflagged_after_ack.add(mid)
    e.violations += 1
    e.affected.add(f"{kw['process']}/{kw['consumer']}")
    return (mid,)


def _plant_swap(g: Generated, kind: str, draw: Any, used: set[str]) -> tuple[str, ...]:
    """Swaps two adjacent deliveries of one stream (and their acks): an ordering violation."""
    once = g.once(used)
    acks = {kw["value"]: i for i, (_, kw) in enumerate(g.ops) if _is_ack(kw)}
    streams: dict[tuple[int, str, int], list[int]] = {}
    for i, (_, kw) in enumerate(g.ops):
        if _is_delivery(kw) and not kw["redelivered"]:
            streams.setdefault((kw["process"], kw["consumer"], kw["publisher"]), []).append(i)
    pairs = []
    for key, pos in sorted(streams.items()):
        for a, b in itertools.pairwise(pos):
            ka, kb = g.ops[a][1]["value"], g.ops[b][1]["value"]
            if ka not in once or kb not in once:
                continue
            # After the swap `ka` comes late: keep it a violation, not an unconfirmed reorder.
            if g.outcomes.get(ka) == "ok" or g.publish_process.get(ka) == g.publish_process.get(kb):
                pairs.append((key, a, b))
    if not pairs:
        return ()
    key, a, b = draw(st.sampled_from(pairs))
    (ta, ka), (tb, kb) = g.ops[a], g.ops[b]
    g.ops[a], g.ops[b] = (ta, kb), (tb, ka)
    if g.acks:  # each ack goes with its message's delivery
        x, y = acks[ka["value"]], acks[kb["value"]]
        (tx, ax), (ty, ay) = g.ops[x], g.ops[y]
        g.ops[x], g.ops[y] = (tx, _ack(kb)), (ty, _ack(ka))
        assert ax["value"] == ka["value"] and ay["value"] == kb["value"]
    g.expected.violations += 1
    g.expected.affected.add(f"{key[0]}/{key[1]}")
    return (ka["value"], kb["value"])


# Each plant kind's planter, in the order of PLANTS.
_PLANTERS: dict[str, Planter] = {
    "drop": _plant_drop,
    "dup_unflagged": _plant_dup,
    "dup_flagged": _plant_dup,
    "dup_same_consumer": _plant_dup_same_consumer,
    "unexpected": _plant_unexpected,
    "deliver_info": _plant_deliver_outcome,
    "deliver_failed": _plant_deliver_outcome,
    "swap": _plant_swap,
    "unacked": _plant_unacked,
    "unflagged_after_ack": _plant_unflagged_after_ack,
    "dead_letter": _plant_dead_letter,
    "dead_letter_delivered": _plant_dead_letter_delivered,
}
assert tuple(_PLANTERS) == PLANTS


@st.composite
def planted_histories(draw: Any, kinds: tuple[str, ...] = PLANTS, max_plants: int = 3,
                      sac: bool | None = None) -> Generated:
    """Returns a correct history with up to `max_plants` anomalies of the given kinds planted."""
    g = copy.deepcopy(draw(correct_histories(sac=sac)))
    used: set[str] = set()
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=min(1, max_plants),
                              max_size=max_plants)):
        plant(g, kind, draw, used)
    return g


def with_acks_after_every_delivery(g: Generated) -> Generated:
    """Takes a history without acks. Returns a copy with each delivery acked right after it,
    at the same time: a history the checkers must read exactly as the original."""
    assert not g.acks
    out = copy.deepcopy(g)
    out.acks = True
    out.ops = []
    for t, kw in g.ops:
        out.ops.append((t, kw))
        if _is_delivery(kw):
            out.ops.append((t, _ack(kw)))
    return out


NODES = ("n1", "n2", "n3")
_STOPS = {"start-partition": "stop-partition", "kill": "start", "stop": "start",
          "pause": "resume", "start-packet": "stop-packet",
          "start-rolling-restart": "stop-rolling-restart"}
FAULT_FS = ("start-partition", "stop-partition", "kill", "stop", "start", "pause", "resume",
            "start-packet", "stop-packet", "start-rolling-restart", "stop-rolling-restart",
            "heal")


@st.composite
def random_histories(draw: Any, max_steps: int = 80) -> Generated:
    """Returns a history that keeps the contract but follows no queue model: ids published by
    any process, completed any way or never, delivered any number of times to any consumer
    and channel, flagged or not, published or not; acks (when recorded) of any waiting
    delivery; dead letters of any id, with a reason or none, and now and then the harness's
    observation that the queue dead-letters (to its own or the user's exchange, with a limit
    or none); nemesis faults and stops of any kind and target, in any order, some failing;
    phase events (main's optional) with every drain ending. Half the histories give
    publishes and deliveries priorities (none, 1 or 9, each drawn on its own, so that a
    delivery's may differ from its publish's or be the only one). Some client processes are
    written as decimal strings, some consumer tags are missing, some nemesis completions are
    ok rather than info, some name their nodes as one string. Times often tie. Its `expected`
    is empty: it is for comparing a checker with the oracle, not for planting."""
    h = _Anything(draw, draw(st.booleans()))
    main_events = draw(st.booleans()) or draw(st.booleans())
    if draw(st.integers(0, 2)) == 0:  # the queue dead-letters: to the harness's, or the user's
        h.emit(type="info", process=HARNESS, f="dead-lettering", value={
            "queue": "q", "by": draw(st.sampled_from(["harness", "user"])),
            "limits": draw(st.sampled_from([[], ["max length 5 (drop-head)"]]))})
    if main_events:
        h.emit(type="info", process=HARNESS, f="phase", value={"phase": "main", "state": "start"})
    steps = {"invoke": h.invoke, "complete": h.complete, "deliver": h.deliver, "ack": h.ack,
             "nemesis": h.nemesis, "dead-letter": h.dead_letter, "end": h.end}
    for step in draw(st.lists(st.sampled_from(
            ["invoke", "invoke", "complete", "complete", "deliver", "deliver", "deliver", "ack",
             "ack", "nemesis", "dead-letter", "end"]), min_size=5, max_size=max_steps)):
        steps[step]()
    if main_events:
        if draw(st.booleans()):
            h.emit(type="info", process=HARNESS, f="stop-workers", value={"phase": "main"})
        h.emit(type="info", process=HARNESS, f="phase", value={"phase": "main", "state": "end"})
    h.drain_end(draw(st.sampled_from(["complete", "plain", "incomplete", "refused", "none"])))
    return Generated(h.ops, h.outcomes, h.publish_process, Expected(), False, h.acks, 100)


_IDS = [f"{p}-{s}" for p in (1, 2, 3) for s in range(6)] + ["x", "7-x"]


def _pub_seq(mid: str) -> tuple[int | None, int | None]:
    """Takes a message id. Returns its publisher and seq, each None where the id has none."""
    head, _, tail = mid.partition("-")
    return (int(head) if head.isdigit() else None, int(tail) if tail.isdigit() else None)


class _Anything:
    """The history `random_histories` draws, as it grows: one method per kind of step, each
    drawing what it does (a step with nothing to act on does nothing)."""

    def __init__(self, draw: Any, acks: bool) -> None:
        self.draw = draw
        self.acks = acks
        self.priorities = draw(st.booleans())
        self.t = 0
        self.ops: list[tuple[int, dict[str, Any]]] = []
        self.outcomes: dict[str, str] = {}
        self.publish_process: dict[str, int] = {}
        self.open_publishes: dict[str, int] = {}
        self.waiting: list[tuple[int, str | None, str, int | None, int | None]] = []  # unacked

    def emit(self, **kw: Any) -> None:
        self.t += self.draw(st.integers(0, 3)) * MS
        self.ops.append((self.t, kw))

    def priority(self) -> int | None:
        """A message's priority: none in a history without priorities, else none, 1 or 9."""
        return self.draw(st.sampled_from([None, 1, 9])) if self.priorities else None

    def proc(self, p: int) -> int | str:
        """A client process, now and then written as text (the checker reads it as text)."""
        return str(p) if self.draw(st.integers(0, 5)) == 0 else p

    def some_id(self) -> str:
        """Draws an id: mostly a published one, now and then any."""
        published = sorted(self.publish_process)
        return self.draw(st.sampled_from(published if published and self.draw(st.integers(0, 5))
                                         else _IDS))

    def invoke(self) -> None:
        fresh = [m for m in _IDS if m not in self.publish_process]
        if not fresh:
            return
        mid = self.draw(st.sampled_from(fresh))
        p = self.draw(st.integers(1, 4))
        pub, seq = _pub_seq(mid)
        self.publish_process[mid] = p
        self.open_publishes[mid] = p
        self.emit(type="invoke", process=self.proc(p), f="publish", value=mid, node="n1",
                  queue="q", publisher=pub, seq=seq, phase="main", priority=self.priority())

    def complete(self) -> None:
        if not self.open_publishes:
            return
        draw = self.draw
        mid = draw(st.sampled_from(sorted(self.open_publishes)))
        p = self.open_publishes.pop(mid)
        outcome = draw(st.sampled_from(["ok", "ok", "fail", "info"]))
        self.outcomes[mid] = outcome
        pub, seq = _pub_seq(mid)
        error = None if outcome == "ok" else draw(
            st.sampled_from([None, "nack", "returned: unroutable", "timeout"]))
        self.emit(type=outcome, process=self.proc(p), f="publish", value=mid, node="n1",
                  queue="q", publisher=pub, seq=seq, phase="main", error=error)

    def deliver(self) -> None:
        draw = self.draw
        mid = self.some_id()
        p = draw(st.integers(5, 7))
        tag = draw(st.sampled_from(["a", "b", "a", "b", None]))
        pub, seq = _pub_seq(mid) if draw(st.integers(0, 4)) else (None, None)
        f = draw(st.sampled_from(["consume", "consume", "drain"]))
        self.emit(type="ok", process=self.proc(p), f=f, value=mid,
                  node=draw(st.sampled_from(NODES)), queue="q", publisher=pub, seq=seq,
                  consumer=tag, redelivered=draw(st.sampled_from([False, False, True, None])),
                  phase="main", priority=self.priority())
        if self.acks:
            self.waiting.append((p, tag, mid, pub, seq))

    def end(self) -> None:
        """A consumer's end: a cancel or a close of any consumer, of any type, by the harness or
        the broker."""
        draw = self.draw
        p = draw(st.integers(5, 7))
        self.emit(type=draw(st.sampled_from(["invoke", "ok", "info", "fail"])),
                  process=self.proc(p), f=draw(st.sampled_from(["cancel", "close"])),
                  node=draw(st.sampled_from(NODES)), queue="q",
                  consumer=draw(st.sampled_from(["a", "b", "a", "b", None])), phase="main",
                  extra={"by": draw(st.sampled_from(["harness", "broker"]))})

    def dead_letter(self) -> None:
        draw = self.draw
        mid = self.some_id()
        p = draw(st.integers(8, 9))
        pub, seq = _pub_seq(mid)
        self.emit(type="ok", process=self.proc(p), f="dead-letter", value=mid, node="n1",
                  queue="q.harness-dlq", publisher=pub, seq=seq, consumer=f"dead-letter-{p}",
                  redelivered=False, phase="drain", extra={"reason": draw(st.sampled_from(
                      ["maxlen", "delivery_limit", "expired", None]))})

    def ack(self) -> None:
        if not self.waiting:
            return
        p, tag, mid, pub, seq = self.waiting.pop(self.draw(st.integers(0, len(self.waiting) - 1)))
        self.emit(type="ok", process=self.proc(p), f="ack", value=mid, node="n2", queue="q",
                  publisher=pub, seq=seq, consumer=tag, phase="main")

    def nemesis(self) -> None:
        draw = self.draw
        f, targets = self.fault()
        value: dict[str, Any] = {"fault": f}
        if targets and draw(st.booleans()):
            value["nodes"] = targets if len(targets) > 1 or draw(st.booleans()) else targets[0]
        node = targets[0] if targets and "nodes" not in value else None
        self.emit(type="invoke", process=NEMESIS, f=f, value={"fault": f})
        outcome = draw(st.sampled_from(["info", "info", "ok", "fail"]))
        self.emit(type=outcome, process=NEMESIS, f=f, value=value, node=node)

    def fault(self) -> tuple[str, list[str]]:
        """Draws a nemesis f and its targets: often the stop of a fault started before, so
        that windows close by their stops."""
        draw = self.draw
        started = [kw for _, kw in self.ops if kw["process"] == NEMESIS
                   and kw["type"] in ("info", "ok") and kw["f"] in _STOPS]
        if started and draw(st.booleans()):
            kw = draw(st.sampled_from(started))
            named = kw["value"].get("nodes") or kw["node"]
            return _STOPS[kw["f"]], [named] if isinstance(named, str) else list(named or [])
        f = draw(st.sampled_from(FAULT_FS))
        return f, draw(st.lists(st.sampled_from(NODES), max_size=2, unique=True))

    def drain_end(self, ending: str) -> None:
        """Takes how the drain ends: complete, plain (no `complete`), incomplete, refused or
        none (no drain). Emits its phase events."""
        if ending != "none":
            self.emit(type="info", process=HARNESS, f="phase",
                      value={"phase": "drain", "state": "start"})
        if ending in ("complete", "plain", "refused"):
            end: dict[str, Any] = {"phase": "drain", "state": "end"}
            if ending != "plain":
                end["complete"] = ending == "complete"
            if ending == "refused":
                end["reason"] = "n3 refused"
            self.emit(type="info", process=HARNESS, f="phase", value=end)
        elif ending == "incomplete":
            self.emit(type="info", process=HARNESS, f="phase",
                      value={"phase": "drain", "state": "incomplete"})
