"""The scenario matrix and repeated runs: judge each run against its scenario's prediction, then
each scenario by how often the prediction held.

Every scenario predicts something that can fail (`Expectation`): either the
run is valid, or the run shows a named anomaly ("lost": confirmed messages
that a complete drain did not find). A run is judged:

- expected valid: valid -> *as expected*; invalid -> **FINDING** (RabbitMQ did
  something its documentation says it does not); unknown -> *unknown*;
- expected an anomaly: shown -> *detected*; valid -> **MISSED** (the harness
  failed to show a loss RabbitMQ documents); invalid for another reason ->
  **FINDING**; unknown -> *unknown*;
- false only because nodes did not boot again after their fault, the queue unproven
  (`unbooted`: a power loss whose nodes never came back) -> *unknown*, never a finding;
- valid but weak (results.json `strength`: RabbitMQ noticed none of its
  faults, or nothing was at risk when they began) -> *weak*, whatever the
  prediction: the run tested nothing, so it is neither a safe pass nor a miss;
- whatever the results, a run that failed for infrastructure reasons (the
  cluster would not start, a node never recovered, a harness error; the
  caller says so) -> *error*: it tested nothing, so it is never a finding.

Over repeated runs a scenario's *rate* is the share of runs whose prediction
held (a weak run counts in the runs, never in what held); it must reach the
expectation's `min_rate` (1.0 for valid, 0.9 by default for an anomaly). The
exit code: 2 when a run was unknown, weak or could not run, or an anomaly
scenario fell short of its rate (the harness is not sensitive enough: that is
a harness failure, never a pass), or a run was an infrastructure error; else 1
when any run is a FINDING; else 0. Rows and
summaries are written as matrix.json and matrix.md, for nightly CI to keep and
for tables to be rebuilt from. When a matrix spans several release lines or
variants, one builder (`side_by_side`) makes the table that puts them side by
side, as plain data: matrix.json keeps it (`side_by_side`, which the pages draw)
and matrix.md opens with it in Markdown.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from checkers.results import FALSE_ONLY
from checkers.verdict import is_weak, lost_is_proven
from clusters.releases import DEFAULT_LINE

# How a run compares with its scenario's prediction.
AS_EXPECTED = "as expected"
DETECTED = "detected"
FINDING = "FINDING"
MISSED = "MISSED"
UNKNOWN = "unknown"
WEAK = "weak"
ERROR = "error"
HELD = frozenset({AS_EXPECTED, DETECTED})

VALID = "valid"
# What a row keeps of a run's versions (the feature flags stay in its results).
ROW_VERSIONS = ("rabbitmq", "erlang", "metadata_store")


@dataclass(frozen=True)
class Expectation:
    """A prediction a run can fail: "valid", or an anomaly the run must show (e.g. "lost"), in at
    least `min_rate` of repeated runs; `settled` adds, for clients that stay (`--stay`), that no
    publish and no consumer was stuck after a heal (the liveness section's settlement)."""

    outcome: str = VALID
    min_rate: float = 1.0
    settled: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= 1:
            raise ValueError(f"min_rate must be in (0, 1], got {self.min_rate}")

    @property
    def anomaly(self) -> str | None:
        """Returns the anomaly the run must show, None when it must be valid."""
        return None if self.outcome == VALID else self.outcome

    def describe(self) -> str:
        """Returns the prediction in a few words."""
        said = (VALID if self.anomaly is None
                else f"{self.anomaly} in >= {self.min_rate:.0%} of runs")
        return f"{said}, {SETTLED_TEXT}" if self.settled else said


# What a staying variant predicts besides its parent's prediction (Expectation.settled).
SETTLED_TEXT = "no publish stuck, no consumer stuck after the heal"
STAY_KEY = "workload.stay"  # the client mode, as a varied setting is named (harness.vary)


def loss(min_rate: float = 0.9) -> Expectation:
    """Returns the prediction that confirmed messages are lost, in at least min_rate of runs."""
    return Expectation("lost", min_rate)


def shows(results: dict[str, Any] | None, anomaly: str) -> bool:
    """Takes results and an anomaly name. Returns whether the results prove that anomaly: the
    queue section is invalid and names it (for "lost", only after a complete drain, or the
    section would be unknown), or, for "ordering", the ordering section is invalid."""
    if not results:
        return False
    if anomaly == "ordering":
        return results.get("ordering", {}).get("valid") is False
    q = results.get("queue", {})
    return q.get("valid") is False and anomaly in q.get("anomalies", ())


def settlement(results: dict[str, Any] | None) -> bool | str | None:
    """Takes a run's results. Returns the liveness section's settlement judgement
    (checkers.settlement): True, False (a publish or a consumer stuck after a heal), "unknown",
    or None when the results have none (checked before it existed, or never checked)."""
    section = ((results or {}).get("liveness") or {}).get("settlement")
    return section.get("valid") if isinstance(section, dict) else None


def unbooted(results: dict[str, Any] | None) -> bool:
    """Takes a run's results. Returns whether they are false only because nodes did not boot
    again: some node never booted after its fault (the run section's `unrecoverable_nodes`, a
    power loss's effect: issue 32), the queue section has no verdict (the drain could not
    prove the queue empty without those nodes), and every section that is false composes only
    when false (liveness: the queue did not come back, which those nodes explain). Such a run
    proved neither a loss nor a pass: it is unknown, never a finding."""
    r = results or {}
    if not (r.get("run") or {}).get("unrecoverable_nodes"):
        return False
    if (r.get("queue") or {}).get("valid") in (True, False):
        return False
    false = [s for s in r.values() if isinstance(s, dict) and s.get("valid") is False]
    return bool(false) and all(s.get(FALSE_ONLY) is True for s in false)


def judge(expect: Expectation, results: dict[str, Any] | None) -> str:
    """Takes the prediction and a run's results (None when it never got to a check). Returns
    how they compare (AS_EXPECTED, DETECTED, FINDING, MISSED, WEAK or UNKNOWN). A prediction
    that the clients' publishes and consumers settle (`settled`) fails on a stuck one (FINDING,
    even beside the anomaly predicted), and a run that showed the rest of it but whose
    settlement is not judged true is UNKNOWN: half a prediction is not a held one. A run false
    only because nodes did not boot again, its queue unproven (`unbooted`), is UNKNOWN."""
    valid = (results or {}).get("valid")
    settled = settlement(results) if expect.settled else True
    if settled is False:
        return FINDING
    if expect.anomaly is not None and shows(results, expect.anomaly):
        return DETECTED if settled is True else UNKNOWN
    if valid is False:
        return UNKNOWN if unbooted(results) else FINDING
    if is_weak(results):
        return WEAK
    if valid is True and expect.anomaly is not None:
        return MISSED
    return AS_EXPECTED if valid is True and settled is True else UNKNOWN


@dataclass(frozen=True)
class Row:
    """One run of one scenario, as the matrix reports it."""

    scenario: str
    expect: str
    judgement: str
    valid: bool | str | None
    exit_code: int
    wall_s: float
    run_dir: str
    seed: int | None = None
    attempts: int | None = None
    acknowledged: int | None = None
    lost: int | None = None
    unexpected: int | None = None
    duplicated: int | None = None
    unflagged_duplicated: int | None = None
    recovered: int | None = None
    ordering_violations: int | None = None
    problems: tuple[str, ...] = ()
    # Why the run is an infrastructure error (judgement ERROR), and which try of it this is.
    infrastructure: str | None = None
    tries: int = 1
    # results.json's strength summary ("faults noticed 3 of 6, failovers 2, ...") and, for a
    # weak run, why it is weak.
    strength: str | None = None
    weak_reason: str | None = None
    # The RabbitMQ release line the run tested (rows stored before there was a choice: 3.10),
    # and the versions its nodes reported (ROW_VERSIONS of results.json's `versions`).
    rabbitmq: str = DEFAULT_LINE
    versions: dict[str, Any] | None = None
    # The other settings the run was varied by, as "queue.type=mirrored, workload.prefetch=1"
    # (`matrix --vary`, harness.vary; "" when none).
    variant: str = ""
    # Whether its prediction also says every publish and consumer settled after the heals
    # (Expectation.settled: its clients stayed).
    settled: bool = False
    # The queue section's own verdict (true, false, "unknown": its drain proved nothing; None in
    # rows stored before it was kept): its lost count is a loss only when this is a bool.
    queue_valid: bool | str | None = None
    # The liveness section's settlement counts ({"publishes": {status: n}, "consumers": {status:
    # n}}: publishes across a heal, consumers through one; None when no fault healed or its
    # results had none).
    settlement: dict[str, dict[str, int]] | None = None
    # On a log every consumer reads whole (a stream), the messages read more than once within
    # one subscription (the queue section's `log_reads`); None elsewhere, and in rows stored
    # before it was counted. There `duplicated` counts messages read by several consumers.
    repeated_in_subscription: int | None = None

    @property
    def expect_valid(self) -> bool:
        """Returns whether the scenario predicts a valid run."""
        return self.expect == VALID

    @property
    def unproven(self) -> bool:
        """Returns whether the run has no verdict to count: results neither true nor false, or
        false only because nodes did not boot again (`unbooted`: judged UNKNOWN)."""
        return self.valid not in (True, False) or (self.valid is False
                                                    and self.judgement == UNKNOWN)

    @property
    def lost_proven(self) -> int | None:
        """Returns its lost count when a drain proved it (the queue section true or false;
        rows stored before that section's verdict was kept: the run's), else None."""
        return self.lost if lost_is_proven(self.queue_valid, self.valid) else None


def make_row(scenario: str, expect: Expectation, exit_code: int, wall_s: float,
             run_dir: Path | str, results: dict[str, Any] | None, error: str | None = None,
             seed: int | None = None, infrastructure: str | None = None,
             tries: int = 1, rabbitmq: str = DEFAULT_LINE, variant: str = "") -> Row:
    """Takes a scenario's name, prediction, exit code, wall time, run directory, results (None
    when it never got to a check), error, seed, why the run is an infrastructure error (None
    when it is not), which try it was, the release line it tested and the other settings it
    was varied by. Returns its Row (judged ERROR when `infrastructure` is given, whatever its
    results say)."""
    r = results or {}
    q = r.get("queue", {})
    o = r.get("ordering", {})
    found = r.get("strength")
    st: dict[str, Any] = found if isinstance(found, dict) else {}
    problems = tuple(r.get("run", {}).get("problems", ()))
    reason = q.get("reason")
    if reason and q.get("valid") != True:  # noqa: E712 (valid may be a string)
        problems += (f"queue: {reason}",)
    if error:
        problems += (error,)
    if infrastructure and infrastructure not in problems:
        problems = (infrastructure, *problems)
    return Row(
        scenario=scenario, expect=expect.outcome,
        judgement=ERROR if infrastructure else judge(expect, results),
        valid=r.get("valid"), exit_code=exit_code, wall_s=round(wall_s, 1),
        run_dir=str(run_dir), seed=seed,
        attempts=q.get("attempt_count"), acknowledged=q.get("acknowledged_count"),
        lost=q.get("lost_count"), unexpected=q.get("unexpected_count"),
        duplicated=q.get("duplicated_count"),
        unflagged_duplicated=q.get("unflagged_duplicated_count"),
        recovered=q.get("recovered_count"), ordering_violations=o.get("violation_count"),
        problems=problems, infrastructure=infrastructure, tries=tries, settled=expect.settled,
        strength=st.get("summary"), weak_reason=st.get("reason") if is_weak(r) else None,
        rabbitmq=rabbitmq, variant=variant, queue_valid=q.get("valid"),
        settlement=settlement_counts(r),
        repeated_in_subscription=(q.get("log_reads") or {}).get("repeated_in_subscription_count"),
        versions={k: v for k, v in (r.get("versions") or {}).items() if k in ROW_VERSIONS}
        or None,
    )


def settlement_counts(results: dict[str, Any]) -> dict[str, dict[str, int]] | None:
    """Takes results. Returns their settlement counts (Row.settlement), None without them."""
    sec = (results.get("liveness") or {}).get("settlement")
    if not isinstance(sec, dict):
        return None
    return {part: {str(k): int(v) for k, v in (sec.get(part) or {}).items()}
            for part in ("publishes", "consumers")}


def _summed(counts: Sequence[dict[str, dict[str, int]] | None]
            ) -> dict[str, dict[str, int]] | None:
    """Returns settlement counts summed over runs (None when no run had any)."""
    have = [c for c in counts if c is not None]
    if not have:
        return None
    out: dict[str, dict[str, int]] = {}
    for c in have:
        for part, tally in c.items():
            mine = out.setdefault(part, {})
            for status, n in tally.items():
                mine[status] = mine.get(status, 0) + n
    return {part: dict(sorted(t.items())) for part, t in out.items()}


@dataclass(frozen=True)
class Summary:
    """What repeated runs of one scenario showed."""

    scenario: str
    expect: str
    min_rate: float
    runs: int
    valid: int
    invalid: int
    unknown: int
    held: int
    lost_min: int | None
    lost_median: float | None
    lost_max: int | None
    wall_s_median: float
    judgements: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    weak: int = 0
    # Runs checked before test strength was judged (no strength in their results).
    unmeasured: int = 0
    rabbitmq: str = DEFAULT_LINE
    variant: str = ""
    settled: bool = False  # Expectation.settled
    # Its runs' seeds, in order, and their settlement counts summed (None: no run had any).
    seeds: tuple[int, ...] = ()
    settlement: dict[str, dict[str, int]] | None = None

    @property
    def expected(self) -> str:
        """Returns what it predicts, as a table's "expected" cell ("valid", or "valid, no
        publish stuck, ..." for clients that stay)."""
        return f"{self.expect}, {SETTLED_TEXT}" if self.settled else self.expect

    @property
    def rate(self) -> float:
        """Returns the share of runs whose prediction held."""
        return self.held / self.runs if self.runs else 0.0

    @property
    def verdict(self) -> str:
        """Returns "ok" when the rate reached the prediction's, else what went wrong."""
        if self.judgements.get(FINDING):
            return FINDING
        if self.rate >= self.min_rate:
            return "ok"
        if self.errors and self.errors + self.held == self.runs:
            return ERROR  # nothing but infrastructure failures kept it from its rate
        if self.weak and self.weak + self.held + self.errors == self.runs:
            return WEAK  # nothing but weak runs (and errors) kept it from its rate
        if self.judgements.get(UNKNOWN) and self.expect == VALID:
            return UNKNOWN
        return "insensitive" if self.expect != VALID else UNKNOWN


def staying(variant: str) -> str | None:
    """Takes a Row's variant. Returns the clients that stayed ("publishers", "consumers",
    "both") when it says any did, else None."""
    stay = settings_of(DEFAULT_LINE, variant).get(STAY_KEY, "none")
    return None if stay == "none" else stay


def expectation_of(expectations: Mapping[str, Expectation], scenario: str,
                   variant: str = "") -> Expectation:
    """Takes each scenario's prediction, a scenario's name and a Row's variant. Returns the
    prediction a run of that variant is judged by: the scenario's (valid when it has none), and
    for a variant whose clients stay, that and `settled` (no publish or consumer stuck after a
    heal: checkers.settlement)."""
    exp = expectations.get(scenario, Expectation())
    return dataclasses.replace(exp, settled=True) if staying(variant) else exp


def summarize(rows: Sequence[Row], expectations: Mapping[str, Expectation]) -> list[Summary]:
    """Takes rows and each scenario's prediction. Returns one Summary per scenario, release
    line and variant (a staying variant judged by `expectation_of`), in the order they first
    appear."""
    out = []
    for name, line, variant in dict.fromkeys((r.scenario, r.rabbitmq, r.variant) for r in rows):
        mine = [r for r in rows
                if r.scenario == name and r.rabbitmq == line and r.variant == variant]
        exp = expectation_of(expectations, name, variant)
        tested = [r for r in mine if r.judgement != ERROR]  # an error tested nothing
        lost = [n for n in (r.lost_proven for r in tested) if n is not None]
        judgements: dict[str, int] = {}
        for r in mine:
            judgements[r.judgement] = judgements.get(r.judgement, 0) + 1
        out.append(Summary(
            scenario=name, expect=exp.outcome, min_rate=exp.min_rate, runs=len(mine),
            valid=sum(r.valid is True for r in tested),
            invalid=sum(r.valid is False and not r.unproven for r in tested),
            unknown=len(mine) - len(tested) + sum(r.unproven for r in tested),
            held=sum(r.judgement in HELD for r in mine),
            lost_min=min(lost) if lost else None,
            lost_median=statistics.median(lost) if lost else None,
            lost_max=max(lost) if lost else None,
            wall_s_median=round(statistics.median(r.wall_s for r in mine), 1),
            judgements=judgements, errors=len(mine) - len(tested),
            weak=sum(r.judgement == WEAK for r in mine),
            unmeasured=sum(r.strength is None and r.judgement != ERROR for r in mine),
            rabbitmq=line, variant=variant, settled=exp.settled,
            seeds=tuple(r.seed for r in mine if r.seed is not None),
            settlement=_summed([r.settlement for r in tested]),
        ))
    return out


def exit_code(rows: Sequence[Row], summaries: Sequence[Summary] = ()) -> int:
    """Takes the rows and their summaries. Returns 2 if any run is unknown or an infrastructure
    error, or a scenario fell short of its detection rate, else 1 if any run is a finding,
    else 0."""
    judgements = {row.judgement for row in rows}
    if (not rows or UNKNOWN in judgements or ERROR in judgements or WEAK in judgements
            or any(s.verdict == "insensitive" for s in summaries)):
        return 2
    return 1 if FINDING in judgements else 0


def problems(summaries: Sequence[Summary]) -> list[str]:
    """Takes summaries. Returns a sentence for each scenario that did not hold, saying why."""
    out = []
    for s in summaries:
        who = named(s.scenario, s.rabbitmq, s.variant)
        if s.verdict == "insensitive":
            never = " never" if s.held == 0 else ""
            out.append(f"{who}: expected {s.expect} but the harness{never} showed it in "
                       f"{s.held} of {s.runs} runs (needs {s.min_rate:.0%}): not sensitive enough")
        elif s.verdict == FINDING:
            out.append(f"{who}: {s.judgements[FINDING]} of {s.runs} runs contradict the "
                       f"prediction ({s.expected})")
        elif s.verdict == UNKNOWN:
            out.append(f"{who}: {s.unknown} of {s.runs} runs had no verdict")
        elif s.verdict == WEAK:
            out.append(f"{who}: {s.weak} of {s.runs} runs were weak (RabbitMQ noticed "
                       "none of their faults, or nothing was at risk): they tested nothing")
        elif s.verdict == ERROR:
            out.append(f"{who}: {s.errors} of {s.runs} runs failed for infrastructure "
                       "reasons (retried, then reported as errors, not findings)")
    return out


def _cell(v: object) -> str:
    return "-" if v is None else str(v)


def named(scenario: str, line: str, variant: str = "") -> str:
    """Takes a scenario's name, its release line and the other settings it was varied by.
    Returns its name, with the release line when that is not the default one and those
    settings ("quorum-ignore (RabbitMQ 4.0, queue.type=stream)")."""
    said = ([] if line == DEFAULT_LINE else [f"RabbitMQ {line}"]) + ([variant] if variant else [])
    return f"{scenario} ({', '.join(said)})" if said else scenario


def _lost_cell(row: Row) -> str:
    """Returns a run's lost count, marked "unproven" when no drain proved it a loss."""
    if row.lost and row.lost_proven is None:
        return f"{row.lost} (unproven)"
    return _cell(row.lost)


def _dup_cell(row: Row) -> str:
    """Returns a run's duplicates: all (unflagged); on a log every consumer reads whole, those
    read again within one subscription, beside the messages read by several (the design)."""
    if row.repeated_in_subscription is not None:
        return (f"{row.repeated_in_subscription} in a subscription ({_cell(row.duplicated)} "
                "read by several: a log)")
    if row.duplicated is None:
        return "-"
    return f"{row.duplicated} ({row.unflagged_duplicated})"


def table(rows: Sequence[Row]) -> str:
    """Takes the rows. Returns them as a Markdown table, one line per run."""
    head = ["scenario", "expected", "seed", "valid", "judgement", "attempts", "acked", "lost",
            "unexpected", "dup (unflagged)", "recovered", "order viol.", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        dup = _dup_cell(row)
        cells = [named(row.scenario, row.rabbitmq, row.variant), row.expect, _cell(row.seed),
                 _cell(row.valid), row.judgement,
                 _cell(row.attempts), _cell(row.acknowledged), _lost_cell(row),
                 _cell(row.unexpected), dup, _cell(row.recovered),
                 _cell(row.ordering_violations), f"{row.wall_s:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {named(row.scenario, row.rabbitmq, row.variant)} (seed {_cell(row.seed)}): "
             f"{'; '.join(row.problems)}"
             for row in rows if row.problems]
    if notes:
        lines += ["", "Problems:", *notes]
    return "\n".join(lines) + "\n"


def summary_table(summaries: Sequence[Summary]) -> str:
    """Takes summaries. Returns them as a Markdown table, one line per scenario."""
    head = ["scenario", "expected", "runs", "valid", "invalid", "unknown", "weak", "rate",
            "needs", "verdict", "lost min / median / max", "wall s (median)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        lost = ("-" if s.lost_min is None
                else f"{s.lost_min} / {s.lost_median:g} / {s.lost_max}")
        cells = [named(s.scenario, s.rabbitmq, s.variant), s.expected, str(s.runs), str(s.valid),
                 str(s.invalid), str(s.unknown),
                 str(s.weak), f"{s.held}/{s.runs}", f"{s.min_rate:.0%}", s.verdict, lost,
                 f"{s.wall_s_median:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _weak_cell(s: Summary) -> str:
    """Returns how many runs were weak, and how many were never judged for strength (checked
    before it was)."""
    return f"{s.weak} ({s.unmeasured} not judged)" if s.unmeasured else str(s.weak)


def pair_table(summaries: Sequence[Summary], twins: dict[str, str | None]) -> str:
    """Takes summaries and each scenario's safe twin (None for none). Returns a Markdown table
    with a line per unsafe scenario that has runs: how often it showed its anomaly, its lost
    min / median / max, and how often its twin was valid; on both sides, how many runs had no
    verdict (unknown: the drain could not prove the queue empty) and how many were weak (their
    faults went unnoticed or found nothing at risk: neither a detection nor a pass; runs checked
    before strength was judged are counted as not judged) (README.md's table). A variant whose
    clients stay is no line of it, nor anyone's twin: it predicts more than its scenario."""
    summaries = [s for s in summaries if not staying(s.variant)]
    by_name = {s.scenario: s for s in summaries}
    head = ["unsafe scenario (predicts lost)", "runs", "shown in", "no verdict", "weak",
            "lost min / median / max", "safe twin (predicts valid)", "runs", "valid in",
            "no verdict", "weak"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        if s.expect == VALID:
            continue
        lost = ("-" if s.lost_min is None
                else f"{s.lost_min:,} / {s.lost_median:,.0f} / {s.lost_max:,}")
        twin = by_name.get(twins.get(s.scenario) or "")
        cells = [s.scenario, str(s.runs), str(s.held), str(s.unknown), _weak_cell(s), lost,
                 twins.get(s.scenario) or "-", str(twin.runs) if twin else "0",
                 str(twin.held) if twin else "-", str(twin.unknown) if twin else "-",
                 _weak_cell(twin) if twin else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class NotApplicable:
    """A scenario a release line cannot run (a mirrored queue on 4.0), and why; never run. The
    other settings it was varied by, when it was (`variant`, as a Row's)."""

    scenario: str
    rabbitmq: str
    reason: str
    variant: str = ""


def _verdict_cell(s: Summary) -> str:
    weak = f", {s.weak} weak" if s.weak else ""
    said = f"{s.held}/{s.runs} {s.verdict}{weak}"
    if staying(s.variant) is None or s.settlement is None:
        return said
    seeds = ",".join(str(x) for x in sorted(s.seeds)) or "none recorded"
    return (f"{said} (seeds {seeds}; publishes across a heal: "
            f"{_tally(s.settlement.get('publishes', {}))}; consumers through a heal: "
            f"{_tally(s.settlement.get('consumers', {}))})")


def _tally(counts: dict[str, int]) -> str:
    """Returns settlement counts as "21,424 settled, 3 stuck" ("none" when empty)."""
    return ", ".join(f"{n:,} {status}" for status, n in counts.items()) or "none"


RABBITMQ_KEY = "broker.rabbitmq"  # the release line, as a varied setting is named


def settings_of(rabbitmq: str, variant: str) -> dict[str, str]:
    """Takes a release line and a variant ("queue.type=mirrored, workload.prefetch=1"). Returns
    every setting the runs were varied by, the release line first."""
    out = {RABBITMQ_KEY: rabbitmq}
    for part in filter(None, variant.split(", ")):
        key, _, value = part.partition("=")
        out[key] = value
    return out


def _place(s: Summary | NotApplicable, column: str) -> tuple[str, str]:
    """Returns where a summary sits in a variant table: (its line's name, its column's value)."""
    settings = settings_of(s.rabbitmq, s.variant)
    value = settings.pop(column, "-")
    line = settings.pop(RABBITMQ_KEY, DEFAULT_LINE)
    rest = ", ".join(f"{k}={v}" for k, v in settings.items())
    return named(s.scenario, line, rest), value


def side_by_side(summaries: Sequence[Summary], not_applicable: Sequence[NotApplicable] = (),
                 column: str = RABBITMQ_KEY) -> dict[str, Any]:
    """Takes summaries, what some variant could not run, and the varied setting to make columns
    of (by default the release line). Returns the variant table as plain data (matrix.json's
    `side_by_side`, which `variant_markdown` and the pages draw): the `column`, its `values` in
    the order they first appear and their `titles` ("RabbitMQ 4.0", "queue.type=stream"), and
    `lines`, one per scenario (and per value of the other varied settings), each its
    `scenario`, what it `expect`s ("-" when only a variant that could not run says) and its
    `cells`, one per value: how often its prediction held, its verdict, how many runs were
    weak; "not applicable: <reason>" where that variant cannot run; "-" where it was not run."""
    cell: dict[tuple[str, str], str] = {}
    expect: dict[str, str] = {}
    for s in summaries:
        name, value = _place(s, column)
        cell[(name, value)] = _verdict_cell(s)
        expect.setdefault(name, s.expected)
    for n in not_applicable:
        cell[_place(n, column)] = f"not applicable: {n.reason}"
    names = list(dict.fromkeys(name for name, _v in cell))
    values = list(dict.fromkeys(v for _n, v in cell))
    title = (lambda x: f"RabbitMQ {x}") if column == RABBITMQ_KEY else (lambda x: f"{column}={x}")
    return {"column": column, "values": values, "titles": [title(x) for x in values],
            "lines": [{"scenario": name, "expect": expect.get(name, "-"),
                       "cells": [cell.get((name, x), "-") for x in values]} for name in names]}


def variant_markdown(table: dict[str, Any]) -> str:
    """Takes a variant table's data (`side_by_side`). Returns it as a Markdown table."""
    head = ["scenario", "expected", *table["titles"]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in table["lines"]:
        out.append("| " + " | ".join([line["scenario"], line["expect"], *line["cells"]]) + " |")
    return "\n".join(out) + "\n"


def variant_table(summaries: Sequence[Summary], not_applicable: Sequence[NotApplicable] = (),
                  column: str = RABBITMQ_KEY) -> str:
    """Takes what `side_by_side` takes. Returns its table in Markdown (`variant_markdown`)."""
    return variant_markdown(side_by_side(summaries, not_applicable, column))


def side_by_side_of(summaries: Sequence[Summary],
                    extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """Takes summaries and matrix.json's further fields (`not_applicable`, as NotApplicable's
    fields, and `vary`, the varied keys). Returns their `side_by_side` table, a column per
    value of the first varied key, else per release line; None when there is nothing to put
    side by side (one release line, nothing varied, no variant such as clients that stay
    beside its scenario, nothing that could not run)."""
    na = [NotApplicable(**x) for x in (extra or {}).get("not_applicable", ())]
    varied = list((extra or {}).get("vary") or ())
    if not (na or varied or len({s.rabbitmq for s in summaries}) > 1
            or any(staying(s.variant) for s in summaries)):
        return None
    return side_by_side(summaries, na, varied[0] if varied else RABBITMQ_KEY)


def write(rows: Sequence[Row], summaries: Sequence[Summary], out_dir: Path,
          extra: dict[str, Any] | None = None, code: int | None = None) -> tuple[Path, Path]:
    """Takes the rows, their summaries, a directory, optional further top-level fields for
    matrix.json (they never replace the standard ones) and an exit code to record in place of
    the rows' own. Writes matrix.json (with `side_by_side` when `side_by_side_of` finds
    something to put side by side) and matrix.md (opening with that table) there. Returns
    both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "matrix.json", out_dir / "matrix.md"
    said = problems(summaries)
    sbs = side_by_side_of(summaries, extra)
    doc = {"exit_code": exit_code(rows, summaries) if code is None else code, "problems": said,
           "summaries": [{**asdict(s), "rate": s.rate, "verdict": s.verdict} for s in summaries],
           **({"side_by_side": sbs} if sbs else {}),
           "rows": [asdict(row) for row in rows]}
    doc.update({k: v for k, v in (extra or {}).items() if k not in doc})
    js.write_text(json.dumps(doc, indent=2) + "\n")
    text = summary_table(summaries) + "\n" + table(rows)
    if sbs:
        text = variant_markdown(sbs) + "\n" + text
    if said:
        text += "\n" + "\n".join(f"- {p}" for p in said) + "\n"
    md.write_text(text)
    return js, md


def read_rows(path: Path) -> list[Row]:
    """Takes a matrix.json. Returns its rows (to rebuild tables across several matrices)."""
    doc = json.loads(path.read_text())
    return [Row(**{**r, "problems": tuple(r.get("problems", ()))}) for r in doc["rows"]]
