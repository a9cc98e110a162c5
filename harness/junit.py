"""JUnit XML of a scenario matrix, for CI: one <testcase> per scenario run.

The shape is the common JUnit one (Ant's / Maven Surefire's, read by GitHub
and GitLab test reporters and junitparser): <testsuites> holding one
<testsuite> with tests/failures/errors/skipped counts and a time, each
<testcase classname="SCENARIO" name="seed N, RabbitMQ LINE" time="S"> (`case_name`: a
nightly over several release lines runs each seed once per line); a run of a variant (its
clients staying, a setting varied: the Row's `variant`) is its own class,
"SCENARIO (VARIANT)" (`case_class`), as it is its own line of the table, so CI
never reads two runs of one seed as one test. A run whose judgement
is a FINDING or MISSED carries a <failure> with a one-sentence message and the
run directory; an infrastructure error or a run with no verdict an <error>
(never a failure: it proves nothing about RabbitMQ); a run not started for
lack of budget a <skipped>. A weak run (valid, but RabbitMQ noticed none of
its faults or nothing was at risk: checkers.verdict) is never a pass: it is a
<skipped type="weak"> saying why, so CI shows it apart from findings and
infrastructure errors. Passing runs carry what they showed and their run
directory in <system-out>. A run whose row names the broker's versions carries
them as the testcase's <properties> ("rabbitmq", "erlang", ...). `sentence`
says in one sentence what a run showed, with the test's strength when the run
has one; the nightly's HTML page uses it too.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clusters.releases import DEFAULT_LINE
from harness import matrix
from harness.matrix import Row
from history.files import write_atomic
from reports.page import row_strength, row_versions, version_value

Kind = Literal["passed", "failure", "error", "skipped"]

KIND_OF: dict[str, Kind] = {
    matrix.AS_EXPECTED: "passed", matrix.DETECTED: "passed",
    matrix.FINDING: "failure", matrix.MISSED: "failure",
    matrix.ERROR: "error", matrix.UNKNOWN: "error", matrix.WEAK: "skipped",
}


# The <skipped> type of a weak run, apart from runs skipped for lack of budget (no type).
WEAK_TYPE = "weak"

# Characters XML 1.0 cannot hold at all (a broker's error text may carry control characters).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(text: str) -> str:
    """Takes text. Returns it without the characters XML 1.0 cannot hold."""
    return _NOT_XML.sub("?", text)


@dataclass(frozen=True)
class Case:
    """One <testcase>: what ran (or did not), how it ended, and what to say about it."""

    classname: str
    name: str
    kind: Kind
    time_s: float = 0.0
    message: str = ""
    type: str = ""
    detail: str = ""
    output: str = ""
    # The testcase's <properties>: the broker's versions, {"rabbitmq": "4.0.5", ...}.
    properties: tuple[tuple[str, str], ...] = ()


def version_properties(row: Row) -> tuple[tuple[str, str], ...]:
    """Takes a matrix row. Returns its versions as testcase properties ("rabbitmq", "4.0.5"),
    led by its rabbitmq release line; none when the row names no version."""
    return tuple((str(k), version_value(v)) for k, v in row_versions(row).items()
                 if v not in (None, "", [], {}))


def _anomalies(row: Row) -> list[str]:
    found = []
    if row.lost:
        found.append(f"{row.lost} confirmed messages lost")
    if row.unexpected:
        found.append(f"{row.unexpected} unexpected deliveries")
    if row.unflagged_duplicated:
        found.append(f"{row.unflagged_duplicated} duplicates without the redelivered flag")
    if row.ordering_violations:
        found.append(f"{row.ordering_violations} ordering violations")
    return found


def is_weak_row(row: Row) -> bool:
    """Takes a matrix row. Returns whether its run was valid but weak (judged "weak", or its
    strength fields say so)."""
    st = row_strength(row)
    return row.judgement == matrix.WEAK or (st is not None and st.weak)


def sentence(row: Row) -> str:
    """Takes a matrix row. Returns what the run showed against its prediction, in one sentence,
    then the test's strength when the row has one ("Test strength: faults noticed ...")."""
    said = _what_it_showed(row)
    st = row_strength(row)
    return f"{said} {st.line()}" if st is not None and st.line() else said


def _what_it_showed(row: Row) -> str:
    seed = f"seed {row.seed}"
    if is_weak_row(row):
        st = row_strength(row)
        why = (st.reason.rstrip(".") if st is not None and st.reason
               else "its faults tested nothing")
        return (f"Valid but weak ({seed}): {why}. No anomaly was found, but the run tested "
                "nothing: not a pass.")
    if row.judgement == matrix.FINDING:
        found = ", ".join(_anomalies(row)) or "see results.json"
        wanted = "a valid run" if row.expect_valid else f"the documented anomaly '{row.expect}'"
        return f"Expected {wanted} but the run ({seed}) was invalid: {found}."
    if row.judgement == matrix.MISSED:
        return (f"Expected the documented anomaly '{row.expect}' but the run ({seed}) was "
                "valid: the harness did not show it.")
    if row.judgement == matrix.ERROR:
        tries = f" on {row.tries} tries" if row.tries > 1 else ""
        return f"Infrastructure failure{tries} ({seed}): {row.infrastructure}."
    if row.judgement == matrix.UNKNOWN:
        why = "; ".join(row.problems) or "no verdict"
        return f"No verdict ({seed}): {why}."
    if row.judgement == matrix.DETECTED:
        found = ", ".join(_anomalies(row)) or row.expect
        return f"Showed the documented anomaly ({seed}): {found}."
    return f"Valid, as expected ({seed})."


def case_class(scenario: str, variant: str = "") -> str:
    """Takes a scenario's name and a Row's variant ("workload.stay=both"; "" for none). Returns
    the testcase's classname: the scenario, with its variant in brackets when it has one
    ("partition (workload.stay=both)")."""
    return f"{scenario} ({variant})" if variant else scenario


def case_name(seed: int | None, rabbitmq: str) -> str:
    """Takes a run's seed and release line. Returns the testcase's name ("seed 4001, RabbitMQ
    4.3")."""
    return f"seed {seed}, RabbitMQ {rabbitmq}"


def case_for_row(row: Row, retried: str | None = None) -> Case:
    """Takes a matrix row and, when it is a second try, why the first was retried. Returns its
    Case."""
    kind: Kind = "skipped" if is_weak_row(row) else KIND_OF.get(row.judgement, "error")
    lines = [f"run directory: {row.run_dir or 'none'}"]
    if retried:
        lines.append(f"retried once with the same seed after: {retried}")
    lines += [f"problem: {p}" for p in row.problems]
    text = "\n".join(lines)
    say = sentence(row)
    props = version_properties(row)
    classname = case_class(row.scenario, row.variant)
    if kind == "passed":
        return Case(classname, case_name(row.seed, row.rabbitmq), kind, row.wall_s,
                    output=say + "\n" + text,
                    properties=props)
    kind_type = ("infrastructure" if row.judgement == matrix.ERROR
                 else WEAK_TYPE if kind == "skipped" else row.judgement)
    return Case(classname, case_name(row.seed, row.rabbitmq), kind, row.wall_s, message=say,
                type=kind_type, detail=say + "\n" + text, output=text, properties=props)


def skipped_case(scenario: str, seed: int | None, reason: str, variant: str = "",
                 rabbitmq: str = DEFAULT_LINE) -> Case:
    """Takes a scenario that was not run, the seed it would have had, why, its variant (""
    for none) and its release line. Returns its Case."""
    return Case(case_class(scenario, variant), case_name(seed, rabbitmq), "skipped",
                message=reason)


def junit_xml(cases: Sequence[Case], suite: str, timestamp: str,
              properties: dict[str, str] | None = None) -> str:
    """Takes the cases, the suite's name, its ISO start time and suite properties. Returns the
    JUnit XML document."""
    counts = {k: sum(c.kind == k for c in cases) for k in ("failure", "error", "skipped")}
    total = f"{sum(c.time_s for c in cases):.1f}"
    root = ET.Element("testsuites", name=suite, tests=str(len(cases)),
                      failures=str(counts["failure"]), errors=str(counts["error"]),
                      skipped=str(counts["skipped"]), time=total)
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)),
                       failures=str(counts["failure"]), errors=str(counts["error"]),
                       skipped=str(counts["skipped"]), time=total, timestamp=timestamp)
    if properties:
        props = ET.SubElement(ts, "properties")
        for k, v in properties.items():
            ET.SubElement(props, "property", name=clean(k), value=clean(v))
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=clean(c.classname), name=clean(c.name),
                           time=f"{c.time_s:.1f}")
        if c.properties:
            props = ET.SubElement(tc, "properties")
            for k, v in c.properties:
                ET.SubElement(props, "property", name=clean(k), value=clean(v))
        if c.kind == "skipped":
            el = ET.SubElement(tc, "skipped", message=clean(c.message))
            if c.type:
                el.set("type", clean(c.type))
        elif c.kind in ("failure", "error"):
            el = ET.SubElement(tc, c.kind, message=clean(c.message), type=clean(c.type))
            el.text = clean(c.detail)
        if c.output:
            ET.SubElement(tc, "system-out").text = clean(c.output)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: Path, cases: Sequence[Case], suite: str, timestamp: str,
                properties: dict[str, str] | None = None) -> Path:
    """Takes the file's path and what `junit_xml` takes. Writes it atomically. Returns the path."""
    return write_atomic(path, junit_xml(cases, suite, timestamp, properties))
