"""Settlement after a heal (checkers.settlement): the rules on literal facts (a publish's as the
oracle states them, the Spark job's columns being held to the oracle below), then planted
histories through the Spark checker (checkers.spark_settlement), each compared whole with the
pure-Python oracle (tests.checkers.oracle_settlement).

Bound in the Spark cases: net_ticktime 2 s (detection 2.5 s) + grace 1.5 s = 4 s; the
partition of n3 heals at 1000.5 ms.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history
from checkers import settlement as S
from checkers.phases import HarnessEvent
from harness import matrix
from history import HARNESS
from reports import report_results
from tests.checkers.oracle_settlement import completion_kind, publish_status
from tests.checkers.oracle_settlement import settlement as oracle
from tests.checkers.test_liveness import BOUND, consume, history, partition

MS = 1_000_000
B = 4000 * MS
HEAL = S.Heal(at=1000 * MS, fault="start-partition", next_fault=None)


# -- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("code,error,kind", [
    ("ok", None, S.CONFIRMED), ("fail", "nack", S.REFUSED), (None, None, S.NONE),
    ("info", "StreamLostError: Transport indicated EOF", S.CLOSED),
    ("info", "abandoned with the process after: StreamLostError: x", S.CLOSED),
    ("info", "no confirm within 5s", S.GAVE_UP),
    ("info", "abandoned with the process after: no confirm within 5s", S.GAVE_UP),
    ("info", "publisher closed with the message in flight", S.RUN_ENDED),
    ("info", "abandoned with the process after: publisher closed with the message in flight",
     S.RUN_ENDED),
    ("info", "blocked", S.BLOCKED), ("info", "confirms off", S.CONFIRMS_OFF),
])
def test_how_a_publish_completed(code, error, kind):
    assert completion_kind(code, error) == kind


@pytest.mark.parametrize("invoke,end,kind,heal,status", [
    (900, 4900, S.CONFIRMED, HEAL, S.SETTLED),  # slow (4 s) but within the bound
    (900, 5100, S.CONFIRMED, HEAL, S.STUCK),  # a confirm past the bound comes too late
    (2000, 5900, S.REFUSED, HEAL, S.SETTLED),  # its deadline counts from its invoke
    (900, 1200, S.CLOSED, HEAL, S.SETTLED),  # the connection closed: settled
    (900, 1900, S.GAVE_UP, HEAL, S.GIVEN_UP),  # a retiring client's 5 s timeout
    (900, 20_000, S.RUN_ENDED, HEAL, S.STUCK),  # open until the run ended
    (900, 3000, S.RUN_ENDED, HEAL, S.UNKNOWN),  # the run ended before the bound
    (900, None, S.NONE, HEAL, S.UNKNOWN),  # a history cut short: nothing guessed
    (900, 20_000, S.RUN_ENDED, S.Heal(1000 * MS, "kill", 3000 * MS), S.INTERRUPTED),
    (900, 9000, S.BLOCKED, HEAL, S.NOT_JUDGED),
])
def test_a_publish_across_a_heal(invoke, end, kind, heal, status):
    got = publish_status(invoke * MS, None if end is None else end * MS, kind, heal, B)
    assert got == status


def _consumer(**kw: Any) -> S.ConsumerFacts:
    base: dict[str, Any] = {"heal": 0, "pid": 9, "node": "n2", "queue": "q",
                            "fed_before": 500 * MS, "fed_after": None, "ended": None,
                            "delivered_by_bound": 3, "acked_by_bound": 3}
    return S.ConsumerFacts(**{**base, **kw})


@pytest.mark.parametrize("kw,main_end,ready,status", [
    ({}, 20_000, True, S.STUCK),
    ({"fed_after": 4000 * MS}, 20_000, True, S.FED),
    ({"fed_after": 6000 * MS}, 20_000, True, S.STUCK),  # fed again, but only past the bound
    ({}, 20_000, False, S.IDLE),  # nothing was ready to feed it
    ({}, 20_000, None, S.UNKNOWN),  # no depth sample says
    ({}, 3000, True, S.UNKNOWN),  # the run ended before the bound
    ({"acked_by_bound": 2}, 20_000, True, S.HOLDING),
    ({"ended": 2000 * MS}, 20_000, True, S.ENDED),
    ({"ended": 800 * MS}, 20_000, True, None),  # gone before the heal: it did not stay
    ({"fed_before": None}, 20_000, True, None),  # never seen subscribed before the heal
])
def test_a_consumer_through_a_heal(kw, main_end, ready, status):
    assert S.consumer_status(_consumer(**kw), HEAL, B, main_end * MS, ready) == status


# -- planted histories through Spark, against the oracle --------------------------------------


def pub(pid: int, seq: int, at: float, outcome: str | None = "ok", done: float | None = None,
        error: str | None = None, node: str = "n1") -> list[tuple[float, dict[str, Any]]]:
    """A publish of process `pid` through `node` at `at` ms, completed `outcome` at `done`."""
    base = {"process": pid, "f": "publish", "value": f"{pid}-{seq}", "node": node,
            "queue": "q", "publisher": pid, "seq": seq, "phase": "main"}
    out = [(at, {"type": "invoke", **base})]
    if outcome is not None:
        out.append((at + 1 if done is None else done, {"type": outcome, **base, "error": error}))
    return out


def depth(at: float, ready: int) -> tuple[float, dict[str, Any]]:
    return (at, {"type": "info", "process": HARNESS, "f": "depth",
                 "value": {"queue": "q", "ready": ready, "unacked": 0, "nodes": {}}})


def leader(at: float, node: str) -> tuple[float, dict[str, Any]]:
    return (at, {"type": "info", "process": HARNESS, "f": "placement", "node": node,
                 "value": {"queue": "q", "leader": node, "members": ["n1", "n2", "n3"]}})


def clients(sac: bool = False, type_: str = "quorum", stay: str = "both",
            reads_from: str = "first") -> tuple[float, dict[str, Any]]:
    """The workload's observation of its clients, at setup (a stream's consumers reading from
    `reads_from`)."""
    log = type_ == "stream"
    return (1, {"type": "info", "process": HARNESS, "f": "clients",
                "value": {"queue": "q", "type": type_, "single_active_consumer": sac,
                          "consumers_share": not log, "reads_from": reads_from if log else None,
                          "stay": stay, "confirm_deadline_s": 300.0,
                          "publish_timeout_s": 5.0}})


def cancel(pid: int, at: float) -> list[tuple[float, dict[str, Any]]]:
    base = {"process": pid, "f": "cancel", "node": "n2", "queue": "q", "consumer": f"c{pid}",
            "phase": "main"}
    return [(at, {"type": "invoke", **base}), (at + 1, {"type": "ok", **base})]


CLOSED_AT_END = "publisher closed with the message in flight"
ABANDONED_AT_END = "abandoned with the process after: " + CLOSED_AT_END


def judged(path: Path, options: CheckOptions | None = None) -> tuple[Any, dict[str, Any]]:
    r = check_history(path, options=options or CheckOptions(), liveness=BOUND)
    sec = r["liveness"]["settlement"]
    assert sec == oracle(path, BOUND.bound_ns)
    return r, sec


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_a_publisher_stuck_after_a_heal_is_a_finding(tmp_path: Path) -> None:
    # Process 1 stays on n1: 1-0 confirmed before the fault, 1-1 in flight at the heal, 1-2 and
    # 1-3 accepted after it and never confirmed; the run ends at 10 s, closing it. Process 2 on
    # n2 is confirmed again 3.3 s after the heal: slow, settled, no finding.
    ops = [clients(), *partition(100, 1000), leader(50, "n1"), leader(1100, "n2"),
           *pub(1, 0, 50), *pub(1, 1, 900, "info", 10_000, CLOSED_AT_END),
           *pub(1, 2, 1500, "info", 10_000, ABANDONED_AT_END),
           *pub(1, 3, 2000, "info", 10_000, ABANDONED_AT_END),
           *pub(2, 0, 1200, "ok", 4500, node="n2")]
    r, sec = judged(history(tmp_path / "h.jsonl", ops, 10_000))
    assert r["valid"] is False and r["liveness"]["valid"] is False
    assert sec["valid"] is False and sec["publishes"] == {"settled": 1, "stuck": 3}
    (f,) = sec["findings"]
    assert {k: f[k] for k in ("what", "status", "queue", "node", "process", "publisher",
                              "stuck", "leader_at_heal", "heal_ms", "bound_ms")} == {
        "what": "publish", "status": "stuck", "queue": "q", "node": "n1", "process": 1,
        "publisher": "1", "stuck": 3, "leader_at_heal": "n1", "heal_ms": 1000.5,
        "bound_ms": 4000.0}
    tl = f["timeline"]
    assert tl["last_confirm_before_ms"] == 51.0 and tl["stuck"]["id"] == "1-1"
    assert [x["id"] for x in tl["later"]] == ["1-2", "1-3"]
    assert tl["later_counts"] == {"stuck": 2}
    assert f in r["liveness"]["findings"]
    assert "stuck after a heal" in r["liveness"]["summary"]
    # RabbitMQ's words for it, in the section and in the liveness section a report quotes.
    assert list(sec["explanations"]) == ["stuck_publish"]
    assert "will be confirmed or nack'd once" in r["liveness"]["explanations"]["stuck_publish"]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_a_consumer_stuck_after_a_heal_is_a_finding(tmp_path: Path) -> None:
    # Consumer 9 on n2, fed before the fault, stays subscribed (cancelled only at the run's end)
    # and is never fed again while the queue holds ready messages; consumer 8 is fed at 1.6 s.
    ops = [clients(), *partition(100, 1000), *pub(1, 0, 10), *pub(1, 1, 20), *pub(1, 2, 30),
           *consume("n2", 9, "1-0", 60), *consume("n2", 8, "1-1", 70),
           *consume("n2", 8, "1-2", 1600), *pub(1, 3, 1500), *pub(1, 4, 1510),
           depth(2000, 5), depth(3000, 5), depth(4500, 4), *cancel(9, 10_000)]
    r, sec = judged(history(tmp_path / "h.jsonl", ops, 10_000))
    assert r["valid"] is False and sec["valid"] is False
    assert sec["consumers"] == {"fed": 1, "stuck": 1}
    (f,) = sec["findings"]
    assert (f["what"], f["process"], f["node"], f["queue"]) == ("consumer", 9, "n2", "q")
    assert f["timeline"] == {"last_fed_before_ms": 60.0, "heal_ms": 1000.5,
                             "first_fed_after_ms": None, "ended_ms": 10000.0}
    assert list(r["liveness"]["explanations"]) == ["stuck_consumer"]
    assert "deliveries will start" in r["liveness"]["explanations"]["stuck_consumer"]


def _on_a_stream(consumer: S.ConsumerFacts, ready: int) -> dict[str, Any]:
    """The settlement section of one consumer of a stream read from its first offset, through
    the heal, with depth samples of `ready` messages in the bound."""
    at, op = clients(type_="stream")
    harness = [HarnessEvent(int(at * MS), "clients", op["value"]),
               *(HarnessEvent(t * MS, "depth", {"queue": "q", "ready": ready})
                 for t in (2000, 4000))]
    return S.settlement_section({}, [], [consumer], [HEAL], B, 20_000 * MS, harness)


@pytest.mark.parametrize("owed,ready,status", [
    (2, 0, "stuck"),  # owed two confirmed messages: stuck, whatever the samples say
    (0, 5, "idle"),  # the log holds 5, but it had read every confirmed one: nothing owed
    (None, 5, "unknown"),  # not counted: nothing guessed
])
def test_a_stream_consumer_is_owed_what_was_confirmed_before_the_heal(owed, ready, status):
    sec = _on_a_stream(_consumer(owed=owed), ready)
    assert sec["consumers"] == {status: 1} and sec["consumers_not_judged"] is None
    if status == "stuck":
        (f,) = sec["findings"]
        assert f["owed"] == 2 and "2 message(s) confirmed before the heal" in f["statement"]
        assert list(sec["explanations"]) == ["stuck_log_consumer"]
        assert "first available message in the log" in sec["explanations"]["stuck_log_consumer"]


STREAM_RULES = CheckOptions(unflagged_duplicates_invalid=False,
                            flagged_duplicates_invalid=False)  # as workloads.kinds.stream sets


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_a_stream_consumer_stuck_after_a_heal_is_a_finding(tmp_path: Path) -> None:
    # A stream read whole by three staying consumers. 1-0 to 1-3 are confirmed before the fault;
    # 1-4 after the heal. Consumer 9 read 1-0 and 1-1 and is never fed again: owed 1-2 and 1-3,
    # stuck. Consumer 8 reads 1-2 to 1-4 after the heal: fed. Consumer 7 had read all four
    # before the heal and gets nothing more: 1-4 was confirmed after it, so it was owed nothing:
    # idle, though the log always held messages.
    ops = [clients(type_="stream"), *partition(100, 1000),
           *(x for seq in range(4) for x in pub(1, seq, 10 + seq)),
           *consume("n2", 9, "1-0", 60), *consume("n2", 9, "1-1", 61),
           *(x for seq in range(2) for x in consume("n1", 8, f"1-{seq}", 62 + seq)),
           *consume("n1", 8, "1-2", 1600), *consume("n1", 8, "1-3", 1601),
           *consume("n1", 8, "1-4", 1603),
           *(x for seq in range(4) for x in consume("n3", 7, f"1-{seq}", 70 + seq)),
           *pub(1, 4, 1500, "ok", 1502),
           depth(2000, 5), depth(3000, 5), depth(4500, 5),
           *cancel(9, 10_000), *cancel(8, 10_000), *cancel(7, 10_000)]
    r, sec = judged(history(tmp_path / "h.jsonl", ops, 10_000), STREAM_RULES)
    assert sec["valid"] is False and r["liveness"]["valid"] is False and r["valid"] is False
    assert sec["consumers"] == {"fed": 1, "idle": 1, "stuck": 1}
    assert sec["consumers_not_judged"] is None
    (f,) = sec["findings"]
    assert (f["what"], f["process"], f["node"], f["owed"]) == ("consumer", 9, "n2", 2)
    assert list(r["liveness"]["explanations"]) == ["stuck_log_consumer"]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_a_slow_but_settled_publish_is_no_finding(tmp_path: Path) -> None:
    # 1-1, in flight at the heal, is confirmed 3.9 s after it: slower than a retiring client
    # would wait, within the bound. The consumer is fed again; nothing is stuck.
    ops = [clients(), *partition(100, 1000), *pub(1, 0, 50), *consume("n2", 9, "1-0", 60),
           *pub(1, 1, 900, "ok", 4900), *consume("n2", 9, "1-1", 4950), depth(3000, 1)]
    r, sec = judged(history(tmp_path / "h.jsonl", ops, 10_000))
    assert sec["valid"] is True and sec["findings"] == [] and sec["explanations"] == {}
    assert (sec["publishes"], sec["consumers"]) == ({"settled": 1}, {"fed": 1})
    assert r["liveness"]["valid"] is not False and r["valid"] is True


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_a_run_ended_too_soon_is_unknown_never_invalid(tmp_path: Path) -> None:
    # The main phase ends 1.5 s after the heal, before the 4 s bound: 1-1 is closed with the run
    # unsettled, the consumer unfed; neither can be judged.
    ops = [clients(), *partition(100, 1000), *pub(1, 0, 50), *consume("n2", 9, "1-0", 60),
           *pub(1, 1, 900, "info", 2500, CLOSED_AT_END), depth(2000, 3), *cancel(9, 2500)]
    r, sec = judged(history(tmp_path / "h.jsonl", ops, 2500))
    assert sec["valid"] == "unknown" and sec["findings"] == []
    assert (sec["publishes"], sec["consumers"]) == ({"unknown": 1}, {"unknown": 1})
    assert r["valid"] is True and r["liveness"]["valid"] == "unknown"


@pytest.mark.parametrize("observed,why", [
    (None, "no observation of its clients"),
    (clients(sac=True), "single active consumer"),
    (clients(type_="stream", reads_from="next"), "own offset, from next"),
    (clients(), None),
])
def test_consumers_are_judged_only_where_any_idle_consumer_is_fed(observed, why):
    harness = [] if observed is None else [
        HarnessEvent(int(observed[0] * MS), "clients", observed[1]["value"])]
    said = S.consumers_not_judged(harness, "q")
    assert said is None if why is None else why in said
    # A consumer that would be stuck on a plain queue is not judged on these.
    ready = [HarnessEvent(t * MS, "depth", {"queue": "q", "ready": 5}) for t in (2000, 4000)]
    sec = S.settlement_section({}, [], [_consumer()], [HEAL], B, 20_000 * MS, harness + ready)
    assert sec["valid"] is False if why is None else sec["valid"] == "unknown"
    assert sec["consumers"] == ({"stuck": 1} if why is None else {"not-judged": 1})
    assert (sec["consumers_not_judged"] is None) == (why is None)


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_two_heals_a_publish_interrupted_at_one_is_judged_at_the_next(tmp_path: Path
                                                                           ) -> None:
    # Heals at 1000.5 and 8000.5 ms; the second fault begins at 3000, before the first heal's
    # bound (5000.5): nothing is judged at the first heal. 1-1, sent before it and closed
    # unconfirmed with the run at 20 s, is still in flight at the second: stuck there, as is
    # 1-2, sent after it. 2-0, confirmed at 6 s (inside the second fault), is interrupted; 3-0,
    # confirmed at 9 s, 1 s after the second heal, settled. Consumer 9 is stuck at the second.
    ops = [clients(), *partition(100, 1000), *partition(3000, 8000, "n2"),
           *pub(1, 0, 50), *consume("n2", 9, "1-0", 60),
           *pub(1, 1, 900, "info", 20_000, CLOSED_AT_END),
           *pub(2, 0, 900, "ok", 6000, node="n2"), *pub(3, 0, 900, "ok", 9000, node="n3"),
           *pub(1, 2, 8200, "info", 20_000, ABANDONED_AT_END),
           depth(9000, 2), depth(11_000, 2), *cancel(9, 20_000)]
    r, sec = judged(history(tmp_path / "h.jsonl", ops, 20_000))
    assert [h["at_ms"] for h in sec["heals"]] == [1000.5, 8000.5]
    assert sec["heals"][0]["next_fault_ms"] == 3000.5 and sec["heals"][1]["next_fault_ms"] is None
    assert sec["publishes"] == {"interrupted": 1, "settled": 1, "stuck": 2}
    assert sec["consumers"] == {"interrupted": 1, "stuck": 1}
    assert [(f["what"], f["heal_ms"]) for f in sec["findings"]] == [
        ("publish", 8000.5), ("consumer", 8000.5)]
    tl = sec["findings"][0]["timeline"]
    assert (tl["stuck"]["id"], [x["id"] for x in tl["later"]]) == ("1-1", ["1-2"])
    assert tl["last_confirm_before_ms"] == 51.0
    assert r["valid"] is False


def test_consumers_are_judged_only_in_the_staying_mode():
    # A retiring consumer's stall is not judged yet (the judgement has not met a real run).
    def why(stay: str) -> str | None:
        at, op = clients(stay=stay)
        event = HarnessEvent(time=int(at * 1e9), f=op["f"], value=op["value"])
        return S.consumers_not_judged([event], "q")
    assert why("both") is None and why("consumers") is None
    assert "do not stay through faults" in (why("none") or "")
    assert "do not stay through faults" in (why("publishers") or "")


def _random_history(rng: random.Random, type_: str = "quorum"
                    ) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    """A random main phase: three to five partitions (some closer together than the bound, so
    that a publish can be interrupted at one heal and judged at a later one) and three staying
    publishers whose publishes complete every way checkers.settlement tells apart, some late,
    some never before the run's end. Returns the ops and the main phase's end (ms)."""
    ops: list[tuple[float, dict[str, Any]]] = [clients(type_=type_)]
    t = 500.0
    for _ in range(rng.randint(3, 5)):
        length = rng.uniform(300, 1500)
        ops += partition(t, t + length, rng.choice(["n1", "n2", "n3"]))
        t += length + rng.choice([rng.uniform(200, 2000), rng.uniform(4500, 9000)])
    end = t + rng.uniform(2000, 12_000)
    for pid in (1, 2, 3):
        at, seq = 50.0, 0
        while at < end - 100:
            done = at + rng.choice([1.0, 5.0, rng.uniform(100, 3000), rng.uniform(4000, 15_000)])
            outcome, error = rng.choice([("ok", None), ("ok", None), ("ok", None),
                                         ("fail", "nack"), ("info", "no confirm within 5s"),
                                         ("info", "StreamLostError: Transport indicated EOF"),
                                         ("info", "blocked")])
            if done >= end:  # still in flight at the run's end: closed with it, or cut short
                outcome, error, done = rng.choice([("info", CLOSED_AT_END, end),
                                                   ("info", ABANDONED_AT_END, end),
                                                   (None, None, end)])
            ops += pub(pid, seq, at, outcome, done, error, node=f"n{pid}")
            seq += 1
            at = max(at + rng.uniform(20, 400), done + 0.5 if rng.random() < 0.5 else at + 1)
    # Three consumers fed in bursts with gaps (some across a heal, some past its bound), one of
    # them cancelled part-way; an ack right after most deliveries, at a breakpoint for some.
    heal_at = [t for t, o in ops if o.get("f") == "stop-partition" and o["type"] == "info"]
    for pid, node in ((7, "n1"), (8, "n2"), (9, "n3")):
        at, seq = rng.uniform(10, 400), 0
        stop = rng.uniform(end / 2, end - 50) if pid == 9 else end - 50
        while at < stop:
            ops += consume(node, pid, f"1-{seq}", at)
            seq += 1
            at += rng.choice([rng.uniform(5, 200), rng.uniform(3000, 6000)])
            if heal_at and rng.random() < 0.2:  # exactly at a heal or at its bound's end
                at = max(at, rng.choice(heal_at) + rng.choice([0.0, B / MS]))
        if pid == 9:
            ops += cancel(pid, stop)
    return ops, end


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("seed,type_", [(7, "quorum"), (31, "quorum"), (2026, "quorum"),
                                        (7, "stream"), (31, "stream")])
def test_spark_agrees_with_the_oracle_on_random_histories_with_several_heals(
        tmp_path: Path, seed: int, type_: str) -> None:
    # On a stream every consumer is owed what was confirmed before each heal (Spark's `owed`).
    ops, end = _random_history(random.Random(seed), type_)
    options = STREAM_RULES if type_ == "stream" else None
    _r, sec = judged(history(tmp_path / "h.jsonl", ops, end), options)  # Spark == oracle
    assert len(sec["heals"]) >= 3 and sum(sec["publishes"].values()) > 0
    assert sum(sec["consumers"].values()) > 0


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_a_stream_counts_reads_again_within_one_subscription(tmp_path: Path) -> None:
    # Two consumers read a stream whole: each message is read by both, the design; consumer 8
    # is handed 1-1 twice, which is counted (reported: streams promise at-least-once).
    ops = [clients(type_="stream"), *(x for seq in range(3) for x in pub(1, seq, 10 + seq)),
           *(x for seq in range(3) for x in consume("n1", 7, f"1-{seq}", 60 + seq)),
           *(x for seq in range(3) for x in consume("n2", 8, f"1-{seq}", 70 + seq)),
           *consume("n2", 8, "1-1", 80)]
    r = check_history(history(tmp_path / "h.jsonl", ops, 1000), options=STREAM_RULES,
                      liveness=BOUND)
    q = r["queue"]
    assert q["valid"] is True and q["duplicated_count"] == 3
    reads = q["log_reads"]
    assert {k: v for k, v in reads.items() if k != "statement"} == {
        "subscriptions": 2, "read_count": 3, "read_by_several_count": 3,
        "repeated_in_subscription_count": 1, "repeated_in_subscription": ["1-1"]}
    assert "3 of 3 messages read were read by more than one of its 2" in reads["statement"]
    # The matrix's row and the report say the same, from the section.
    row = matrix.make_row("s", matrix.Expectation(), 0, 1.0, tmp_path, r)
    assert matrix.table([row]).count("1 in a subscription (3 read by several: a log)") == 1
    page = report_results.counts_section(r)
    assert "read again in one subscription" in page and "by design (not an anomaly)" in page
    # 3 "unflagged duplicates", a log's design: not red; the repeat of 1-1 after 1-2 is
    # out of order on its reader, which the ordering check counts.
    assert re.findall(r'<tr class="bad"><td[^>]*>([^<]*)<', page) == ["out of order"]
