"""The finding report: one Markdown page on an invalid run that a RabbitMQ maintainer can act on.

`python -m harness finding RUN_DIR` writes `RUN_DIR/finding.md` from what the
run stored, and nothing else: test.json, results.json, scenario.toml, the
history (history.jsonl or history.jsonl.gz) and the nodes' logs under nodes/
(nodes/<node>/rabbit.log, or nodes/<node>-rabbit.log.gz as archived). The page
says, in order: the rule that broke, the scenario and the RabbitMQ version (the
title); what RabbitMQ documents, as results.json quotes it (never words of
ours); what the history shows of each example message (reports.finding_examples:
results.json's story of it and its ops from the history with exact times,
flagged "suspect: at a phase boundary" when a delivery lies within a second of
one) and of each stalled hand-over of a single active consumer's queue
(reports.finding_hand_over: the broker's cancel or close, the consumers live
then, the deadline, the next delivery to another consumer, and their ops); the broker's log lines of each incident holding an example, once, with
their evidence file:line and the raw line from the node's log; the versions
(with the release's caveat); and how to reproduce it: the scenario file, the
command, and the replay rate over the series given (reports.finding_replays),
else "not measured".

Plain Markdown, no HTML; the same stored run gives the same bytes (nothing of
the present moment or of the machine is written). A run with nothing to report
(no results.json, results that are not invalid, or no anomaly of the broker's)
is refused by `refusal`, in words the command prints before exiting 2.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from history.files import write_atomic
from reports import finding_hand_over as hand_over
from reports import finding_stuck
from reports import markdown as md
from reports.finding_examples import SUSPECT, Example, example_lines, example_suspects, examples
from reports.finding_history import (
    DELIVERIES,
    SUSPECT_NS,
    Scan,
    boundary_label,
    history_file,
    leader_samples,
    nearest_boundary,
    scan_file,
    target_text,
)
from reports.finding_logs import log_section
from reports.finding_replays import Own, replay_rates
from reports.finding_rules import broken, count_of, finding_kinds, quotations
from reports.page import as_dict
from reports.report_strength import incident_title, incidents_of

FINDING_MD = "finding.md"
RESULTS = "results.json"
TEST = "test.json"
SCENARIO = "scenario.toml"
RUN_COMMAND = "python -m harness run --scenario-file scenario.toml"
# The spec's settings a maintainer asks about first, as a scenario file names them.
SETUP_KEYS = ("backend.kind", "nodes", "broker.rabbitmq", "broker.metadata_store",
              "broker.partition_handling", "broker.net_ticktime", "queue.type", "queue.durable",
              "queue.single_active_consumer", "queue.delivery_limit", "workload.publishers",
              "workload.consumers", "workload.client.prefetch", "workload.client.confirms",
              "check.strict_order")


@dataclass(frozen=True)
class StoredRun:
    """What a run directory holds for the report: test.json (or {}), results.json, and
    scenario.toml's text (None when the run stored none)."""

    dir: Path
    test: dict[str, Any]
    results: dict[str, Any]
    scenario: str | None

    @property
    def spec(self) -> dict[str, Any]:
        """Returns test.json's spec ({} when absent)."""
        return as_dict(self.test.get("spec"))

    @property
    def name(self) -> str:
        """Returns the scenario's name (test.json's), or "unnamed"."""
        return str(self.test.get("name") or self.spec.get("name") or "unnamed")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def refusal(run_dir: Path) -> str | None:
    """Takes a directory. Returns why there is no finding to report in it, or None."""
    if not run_dir.is_dir():
        return f"{run_dir} is not a directory"
    if not (run_dir / RESULTS).is_file():
        return (f"{run_dir} has no {RESULTS}: nothing to report (check it first: python -m "
                f"harness check {run_dir})")
    results = _read_json(run_dir / RESULTS)
    if not isinstance(results, dict):
        return f"{run_dir / RESULTS} is not a readable JSON object"
    if results.get("valid") is not False:
        return (f"{run_dir} is not a finding: its results say valid {results.get('valid')!r}, "
                f"so there is nothing to report")
    if not finding_kinds(results):
        return f"{run_dir} is invalid, but for no anomaly of the broker's: nothing to report"
    return None


def load(run_dir: Path) -> StoredRun:
    """Takes a run directory. Returns what it holds. Raises ValueError with `refusal`'s words
    when it holds no finding."""
    why = refusal(run_dir)
    if why is not None:
        raise ValueError(why)
    scenario = run_dir / SCENARIO
    return StoredRun(run_dir, as_dict(_read_json(run_dir / TEST)),
                     as_dict(_read_json(run_dir / RESULTS)),
                     scenario.read_text(encoding="utf-8") if scenario.is_file() else None)


def versions_of(run: StoredRun) -> dict[str, Any]:
    """Takes a run. Returns its versions: results.json's, else test.json's."""
    return as_dict(run.results.get("versions")) or as_dict(run.test.get("versions"))


def _version(run: StoredRun) -> str:
    v = versions_of(run)
    line = as_dict(run.spec.get("broker")).get("rabbitmq")
    return str(v.get("rabbitmq") or (f"{line} (version not recorded)" if line else "unknown"))


def render(run: StoredRun, replays: Sequence[dict[str, Any]] | None = None,
           rebuilt: str | None = None) -> str:
    """Takes a stored run, the runs of the series given with --replays (None: not measured)
    and, for a run that stored no scenario.toml, one rebuilt (from test.json's spec and the
    faults its history shows as played). Returns the page's Markdown."""
    kinds = finding_kinds(run.results)
    exs, left_out = examples(run.results, kinds)
    stalled, more = hand_over.stalled(run.results) if "consumer_timeout" in kinds else ([], [])
    stuck, more_stuck = finding_stuck.stuck(run.results) if "liveness" in kinds else ([], [])
    path = history_file(run.dir)
    s = scan_file(path, {i for ex in exs for i in ex.ids} | finding_stuck.ids(stuck),
                  hand_over.indices(stalled)) if path is not None else None
    held = _incidents_holding(run.results, exs)
    rates = None if replays is None else {k: replay_rates(replays, _own(run), k) for k in kinds}
    head = broken(kinds[0], run.results, run.spec)
    lines = [f"# {head[0].upper()}{head[1:]}: {md.text(run.name)} on RabbitMQ "
             f"{md.text(_version(run))}", ""]
    lines += _summary(run, kinds, exs, s, rates, stuck)
    lines += _documented(run, kinds)
    lines += _history(run, exs, s, held, [*left_out, *more, *more_stuck], stalled, stuck)
    lines += log_section(run.dir / "nodes", run.results,
                         {pos for found in held.values() for pos, _t in found},
                         [i for ex in exs for i in ex.incident_ids])
    lines += _versions(run)
    lines += _reproduce(run, rebuilt, rates)
    return "\n".join(lines).rstrip("\n") + "\n"


def write(run_dir: Path, out: Path | None = None,
          replays: Sequence[dict[str, Any]] | None = None, rebuilt: str | None = None) -> Path:
    """Takes a run directory, where to write (None: RUN_DIR/finding.md), the listed runs of
    --replays and a rebuilt scenario file's text. Writes the page. Returns its path. Raises
    ValueError when the run holds no finding (`refusal`)."""
    page = render(load(run_dir), replays, rebuilt)
    return write_atomic(out or run_dir / FINDING_MD, page)


def _own(run: StoredRun) -> Own:
    start = run.test.get("start_time")
    try:
        when = datetime.fromisoformat(str(start)) if start else None
    except ValueError:
        when = None
    seed = run.test.get("seed", run.spec.get("seed"))
    return Own(run.name, run.dir.name, seed if isinstance(seed, int) else None, when)


def _summary(run: StoredRun, kinds: Sequence[str], exs: Sequence[Example], s: Scan | None,
             rates: Mapping[str, Sequence[Any]] | None,
             stuck: Sequence[dict[str, Any]] = ()) -> list[str]:
    seed = run.test.get("seed", run.spec.get("seed"))
    desc = run.spec.get("description")
    started = run.test.get("start_time") or "at an unknown time"
    lines = [f"Scenario {md.code(run.name)}" + (f" ({md.text(desc)})" if desc else "")
             + f", seed {md.text(seed)}, started {md.text(started)}. What its check found "
             "against RabbitMQ:", ""]
    for k in kinds:
        n = count_of(k, run.results)
        lines.append(f"- {md.code(k)}" + (f" ({n:,})" if n is not None else "")
                     + f": {md.text(broken(k, run.results, run.spec))}")
    lines += ["", f"Phase boundaries: {_boundary_sentence(exs, s)}{_stuck_sentence(stuck, s)}",
              "",
              f"Replay rate: {_rate_words(rates)}", ""]
    return lines


def _boundary_sentence(exs: Sequence[Example], s: Scan | None) -> str:
    """Returns whether any example lies within a second of a phase boundary, in words."""
    if s is None:
        return "not measured: the run stored no history."
    found = [ex.heading for ex in exs if example_suspects(ex, s)]
    if found:
        return (f"**{SUSPECT}**: a delivery of {len(found)} of the {len(exs)} example(s) lies "
                f"within 1 s of a phase boundary ({'; '.join(found)}; see each below).")
    nearest = [(abs(d[0]), d[0]) for ex in exs for i in ex.incident_ids
               for op in s.by_id.get(i, [])
               if op.f in DELIVERIES and (d := nearest_boundary(op.time, s.phases))]
    if not nearest:
        return "no delivery of an example message to measure."
    closest = min(nearest)[1] / 1e6
    return (f"no example's delivery lies within 1 s of one (the closest is {abs(closest):,.1f} ms "
            f"{'before' if closest < 0 else 'after'} its boundary).")


def _stuck_sentence(stuck: Sequence[dict[str, Any]], s: Scan | None) -> str:
    """Returns how far the stuck publishes' sends lie from the nearest phase boundary, in words
    ("" without a stuck publish or a history)."""
    sent = [as_dict(as_dict(f.get("timeline")).get("stuck")).get("sent_ms") for f in stuck
            if f.get("what") == "publish"]
    near = [found for ms in sent if isinstance(ms, int | float) and s is not None
            and (found := nearest_boundary(int(ms * 1e6), s.phases)) is not None]
    if not near:
        return ""
    gap, boundary = min(near, key=lambda x: abs(x[0]))
    where = "before" if gap < 0 else "after"
    flag = f" **{SUSPECT}**" if abs(gap) <= SUSPECT_NS else ""
    return (f" Stuck publishes: the send closest to a phase boundary lies {abs(gap) / 1e6:,.1f} ms "
            f"{where} {boundary_label(boundary)}{flag}; the harness's own close of a channel at "
            "the run's end comes after the deadline the publish was judged by, so it is not what "
            "the finding counts.")


def _rate_words(rates: Mapping[str, Sequence[Any]] | None) -> str:
    """Takes the replay rates per kind of the finding (None: not measured). Returns them in
    words: one kind's rates alone, several kinds' each after its name, so that a run showing a
    predicted loss beside a stuck publish never lends the loss's rate to the stall."""
    if rates is None:
        return "not measured (give --replays with the series' matrix.json files or archives)."
    if not any(rates.values()):
        return "no run of this scenario in the series given."
    def said(of: Sequence[Any]) -> str:
        return "; ".join(md.text(r.sentence()) for r in of)
    if len(rates) == 1:
        return said(next(iter(rates.values()))) + "."
    return "; ".join(f"{md.code(k)} {said(of)}" for k, of in rates.items()) + "."


def _documented(run: StoredRun, kinds: Sequence[str]) -> list[str]:
    lines = ["## What RabbitMQ documents", ""]
    for k in kinds:
        lines += [f"### {md.code(k)}: {md.text(broken(k, run.results, run.spec))}", ""]
        said = quotations(k, run.results)
        if not said:
            lines += [f"results.json carries no quotation of RabbitMQ's documentation for "
                      f"{md.code(k)} (its section has no explanations); the check's rule is "
                      f"its own, not quoted here.", ""]
        for paragraph in said:
            lines += [*md.quote(paragraph), ""]
    return lines


def _history(run: StoredRun, exs: Sequence[Example], s: Scan | None,
             held: dict[str, list[tuple[int, str]]], left_out: Sequence[str],
             stalled: Sequence[dict[str, Any]] = (),
             stuck: Sequence[dict[str, Any]] = ()) -> list[str]:
    start = run.test.get("history_start_unix")
    start_unix = float(start) if isinstance(start, int | float) else None
    lines = ["## What the history shows", "",
             "Times are seconds since the test started (the history's clock); UTC is that "
             "time on the wall clock the nodes' logs use (test.json's history_start_unix). "
             "Each table is the message's ops from the history, with the harness's and the "
             "nemesis's ops within 2 s of them and every cancel or close of a consumer "
             "holding it.", ""]
    lines += _faults(run.results)
    if s is not None:
        lines += _leaders(s)
    for ex in exs:
        lines += example_lines(ex, s, start_unix, [t for _p, t in held.get(ex.heading, [])])
    for x in stalled:
        lines += hand_over.lines(x, run.results, s, start_unix)
    for x in stuck:
        lines += finding_stuck.lines(x, run.results, s, start_unix)
    lines += [f"- {md.text(n)}" for n in left_out]
    return [*lines, ""] if left_out else lines


def _faults(results: dict[str, Any]) -> list[str]:
    faults = [as_dict(f) for f in results.get("faults") or []]
    if not faults:
        return []
    rows = []
    for f in faults:
        rows.append([md.text(f.get("fault") or f.get("f")), md.text(target_text(f)),
                     _s(f.get("start_ms")), _s(f.get("end_ms")),
                     md.text(f.get("evidence") or f.get("noticed"))])
    return ["The run's faults:", "",
            *md.table(("fault", "nodes", "start (s)", "end (s)", "noticed"), rows), ""]


def _leaders(s: Scan) -> list[str]:
    samples = leader_samples(s)
    if not samples:
        return ["The harness sampled no queue leader.", ""]
    said = "; ".join(f"{md.text(leader)} at {t / 1e9:.3f} s" + (f" ({md.code(q)})" if q else "")
                     for t, q, leader in samples)
    return [f"The queue's leader as the harness sampled it (between samples it may have moved: "
            f"the incidents' failovers say when): {said}.", ""]


def _s(ms: Any) -> str:
    return f"{float(ms) / 1000:.3f}" if isinstance(ms, int | float) else ""


def _incidents_holding(results: dict[str, Any],
                       exs: Sequence[Example]) -> dict[str, list[tuple[int, str]]]:
    """Returns each example's heading -> (position, title) of the incidents holding its
    messages."""
    out: dict[str, list[tuple[int, str]]] = {}
    for pos, inc in enumerate(incidents_of(results) or []):
        named = {str(i) for ids in as_dict(inc.get("examples")).values()
                 if isinstance(ids, list) for i in ids}
        for ex in exs:
            if named & set(ex.incident_ids):
                out.setdefault(ex.heading, []).append((pos, incident_title(inc, pos)))
    return out


def _versions(run: StoredRun) -> list[str]:
    v = versions_of(run)
    if not v:
        return ["## Versions", "", "Neither results.json nor test.json records them.", ""]
    lines = ["## Versions", ""]
    for key, value in v.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        lines.append(f"- {md.text(str(key).replace('_', ' '))}: {md.text(shown)}")
    return [*lines, ""]


def _reproduce(run: StoredRun, rebuilt: str | None,
               rates: Mapping[str, Sequence[Any]] | None) -> list[str]:
    lines = ["## Reproduce", ""]
    settings = [(k, _dotted(run.spec, k)) for k in SETUP_KEYS]
    rows = [[md.code(k), md.text(v if isinstance(v, str) else json.dumps(v))]
            for k, v in settings if v is not None]
    if rows:
        lines += ["The setup, as the spec says it:", "", *md.table(("setting", "value"), rows), ""]
    text = run.scenario if run.scenario is not None else rebuilt
    if text is None:
        lines += [f"The run stored no {SCENARIO}, and none could be rebuilt; test.json's spec "
                  "is the whole test.", ""]
    else:
        if run.scenario is None:
            lines += [f"The run stored no {SCENARIO} (it predates them); this one was rebuilt "
                      "from test.json's spec and the faults its history shows as played.", ""]
        lines += [f"Save this as {md.code(SCENARIO)}:", "", *md.fence(text.splitlines(), "toml"),
                  "", "and run it (from the harness's checkout, as root):", "",
                  *md.fence([RUN_COMMAND], "sh"), ""]
    return [*lines, f"Replay rate: {_rate_words(rates)}"]


def _dotted(spec: dict[str, Any], key: str) -> Any:
    node: Any = spec
    for part in key.split("."):
        node = as_dict(node).get(part)
    return node
