"""The priority scenarios (quorum-priorities and its fault-free control): where they run and
where they are refused, that their workload is one the priority check can judge, and, through a
model of a strict-priority quorum queue driven by the scenario's own workload options, that a
run keeping RabbitMQ 4.3's promise is valid (ordering judged per publisher and priority) with
well over 1,000 deliveries judged."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from harness.scenarios import SCENARIOS, not_applicable
from harness.spec import TestSpec
from tests.checkers.histories import Builder
from workloads.priorities import PriorityDraw, levels, parse

NAMES = ("quorum-priorities", "quorum-priorities-healthy")
# A message without a priority counts as this level on RabbitMQ 4.3.
DEFAULT_LEVEL = 4


@pytest.mark.parametrize("name", NAMES)
def test_the_priority_scenarios_run_on_4_3_and_4_0_and_are_refused_on_3_10(name: str) -> None:
    spec = SCENARIOS[name].spec
    assert spec.broker.rabbitmq == "4.3" and spec.refusal() is None
    spec.validate()
    assert spec.warnings() == []
    refused = not_applicable(spec)
    assert [line for line, _ in refused] == ["3.10"]
    assert "3.10's quorum queues have no message priorities" in refused[0][1]
    on_4_0 = dataclasses.replace(spec, broker=dataclasses.replace(spec.broker, rabbitmq="4.0"))
    on_4_0.validate()  # two levels served at a ratio: the run goes on, judged by their rule
    assert any("judges the two-level rule only" in w for w in on_4_0.warnings())


def level_rates(spec: TestSpec) -> dict[int, float]:
    """Returns the publishes per second the spec's publishers offer at each 4.3 level."""
    choices = parse(spec.workload.priorities or "")
    total = sum(c.weight for c in choices)
    out: dict[int, float] = {}
    for c in choices:
        level = DEFAULT_LEVEL if c.priority is None else c.priority
        out[level] = out.get(level, 0.0) + spec.workload.rate * c.weight / total
    return out


@pytest.mark.parametrize("name", NAMES)
def test_the_workload_is_one_the_priority_check_can_judge(name: str) -> None:
    spec = SCENARIOS[name].spec
    w = spec.workload
    # Judged: first deliveries to consumers of prefetch 1 that settled before, none competing.
    assert w.consumers == 1 and w.client.prefetch == 1 and not spec.queue.single_active_consumer
    assert w.client.crash_after == 0 and w.client.reject_share == w.client.nack_share == 0
    assert len(levels(w.priorities)) >= 3 and w.backlog >= 1000
    # A backlog of mixed priorities stands: the consumer keeps up with the top level only.
    rates = level_rates(spec)
    assert w.consume_rate is not None
    assert rates[max(rates)] < w.consume_rate < w.rate
    # Judged per run, estimated at half the asked consume rate over the main phase less the
    # faults' downtime (a kill's 15 s at most, each): well over 1,000.
    down = 15.0 * 2 if spec.nemesis.faults else 0.0
    assert w.consume_rate / 2 * (spec.time_limit_s - down) >= 1000


def test_the_scenario_changes_the_leader_and_its_control_is_the_same_without_faults() -> None:
    faulty, healthy = (SCENARIOS[n].spec for n in NAMES)
    assert [(e.fault, e.targets) for e in faulty.nemesis.entries()] == [("kill", "leader")]
    assert faulty.nemesis.duration_s == 15 and faulty.nemesis.interval_s == 20
    assert healthy.nemesis.faults == ()
    assert dataclasses.replace(faulty, name=healthy.name, description=healthy.description,
                               nemesis=healthy.nemesis) == healthy
    for n in NAMES:
        assert SCENARIOS[n].expect.anomaly is None and SCENARIOS[n].twin is None
        assert "judged" in SCENARIOS[n].spec.description


# -- a model of a strict-priority quorum queue, driven by the scenario's workload ---------------


class StrictQueue:
    """RabbitMQ 4.3's promise, in small: ready messages by level, each level first in first
    out; returned messages ahead of every fresh one, in the order they came back."""

    def __init__(self) -> None:
        self.ready: dict[int, deque[str]] = {}
        self.returned: deque[str] = deque()

    def enqueue(self, mid: str, priority: int | None) -> None:
        level = DEFAULT_LEVEL if priority is None else priority
        self.ready.setdefault(level, deque()).append(mid)

    def take(self) -> tuple[str, bool] | None:
        """Returns the next message to dispatch and whether it was returned, or None."""
        if self.returned:
            return self.returned.popleft(), True
        for level in sorted(self.ready, reverse=True):
            if self.ready[level]:
                return self.ready[level].popleft(), False
        return None


def simulate(path: Path, spec: TestSpec, consume_rate: float, kills_s: tuple[float, ...]) -> None:
    """Writes the history of the spec's workload against a StrictQueue: the backlog, then
    publishers at the spec's rate (each message confirmed as it is enqueued) and one consumer
    of prefetch 1 acking at `consume_rate`, its connection lost at each kill (its message
    returned, a new consumer 0.5 s later) and at the main phase's end, then a drain of
    prefetch 200."""
    w = spec.workload
    draws = [PriorityDraw(parse(w.priorities or ""), random.Random(f"1-priorities-{k}"))
             for k in range(w.publishers)]
    q, seqs = StrictQueue(), [0] * w.publishers
    prio: dict[str, int | None] = {}
    with Builder(path, step=0) as b:
        b.priorities(consume=1, drain=200)

        def publish(k: int, t: float) -> None:
            mid, p = f"{k}-{seqs[k]}", draws[k]()
            b.at(t).publish(k, seqs[k], priority=p)
            q.enqueue(mid, p)
            prio[mid], seqs[k] = p, seqs[k] + 1

        for _ in range(w.backlog):
            publish(0, 0.0)
        b.at(1).phase("main", "start")
        end_ms, every_ms = spec.time_limit_s * 1000, 1000 * w.publishers / w.rate
        pid, held, next_at, kills = 100, None, 1.0, [1000 * k for k in kills_s]
        for tick in range(1, int(end_ms)):
            t = float(tick)
            for k in range(w.publishers):
                if (t - k) % every_ms < 1:
                    publish(k, t)
            if kills and t >= kills[0]:
                kills.pop(0)
                if held is not None:
                    q.returned.append(held[0])
                pid, held, next_at = pid + 1, None, t + 500
            if held is not None and t >= held[1]:
                b.at(t).ack(pid, held[0])
                held, next_at = None, t + 2
            if held is None and t >= next_at and (taken := q.take()) is not None:
                mid, flagged = taken
                b.at(t).deliver(pid, mid, redelivered=flagged, priority=prio[mid])
                held = (mid, t + 1000 / consume_rate)
        if held is not None:  # the consumer's channel closes with it unacked: returned
            q.returned.append(held[0])
        b.at(end_ms).phase("main", "end")
        b.phase("drain", "start")
        while (taken := q.take()) is not None:
            b.deliver(900, taken[0], redelivered=taken[1], f="drain", priority=prio[taken[0]])
            b.ack(900, taken[0], phase="drain")
        b.phase("drain", "end")


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_run_keeping_the_promise_is_valid_with_over_1000_judged(tmp_path: Path) -> None:
    from checkers import check_history

    spec = SCENARIOS["quorum-priorities"].spec
    p = tmp_path / "history.jsonl"
    # At half the asked consume rate, the consumer's node killed twice.
    simulate(p, spec, spec.workload.consume_rate / 2, kills_s=(20.0, 55.0))
    r: dict[str, Any] = check_history(p)
    assert r["valid"] is True and r["queue"]["valid"] is True
    o, pr = r["ordering"], r["priority"]
    assert o["valid"] is True and o["by_priority"] is True and o["violation_count"] == 0
    assert pr["valid"] is True and pr["violation_count"] == 0
    assert pr["judged_count"] >= 1000, pr
    assert pr["not_judged"]["competing"] == 0 and pr["not_judged"]["returned"] >= 2
    # Cross-priority overtakes abound in such a run: read per publisher alone, as before
    # priorities, its deliveries would be FIFO violations.
    assert fifo_descents(p) > 100


def fifo_descents(path: Path) -> int:
    """Returns how many main-phase deliveries of a history come after a later message of the
    same publisher to the same consumer (what a FIFO check blind to priorities would flag)."""
    last: dict[tuple[int, int], int] = {}
    out = 0
    for line in path.read_text().splitlines():
        op = json.loads(line)
        if op["f"] == "consume" and not op["redelivered"]:
            key = (op["process"], op["publisher"])
            out += key in last and op["seq"] <= last[key]
            last[key] = op["seq"]
    return out
