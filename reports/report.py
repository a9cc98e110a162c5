"""The report for a stored run: plots and one self-contained report.html, read top to bottom.

`render(run_dir)` reads what the store holds (shared/DESIGN.md: test.json,
history.jsonl, results.json, harness.log, nodes/<node>/), any of which may be
missing, scans the history once (reports.history_scan, bounded memory), draws
the plots (reports.plots), writes report.html, and, when the run directory
sits in a store (`store/<test>/<timestamp>/`), rewrites the store's index
(reports.index). It returns the written paths of the run directory.

The page (templates/report.html.j2), in reading order: the test's name, when it
ran and the broker's versions (every key test.json's `versions` has); a verdict
banner with one sentence saying why ("valid but weak", never green, when the
faults tested nothing: checkers.verdict) and the test's strength in a line;
the counts; each anomaly class found, with what it means, and each incident
once (or, for older results, example ids per class); each newer promise
results.json judges (priority, delayed retry, consumer timeout, metadata after
the heal: reports.report_promises) with its verdict, counts, examples and its
plot; the plots (latency, throughput, queue depth, queue leader), fault
windows shaded by kind;
availability, time to recover, whether RabbitMQ noticed it, its effects and
the messages at risk, per fault; the harness's own health (results.json's
health section and health.jsonl's memory samples, with their plot:
reports.report_health, reports.plots_health); the test's spec; links to the
files.
`report_html` is the pure part: each section's data (reports.report_results,
report_strength, report_run) into the templates. The page has inline CSS, no
scripts, relative links only, every piece of run text escaped by the
templates, and no empty table cell; it fits a 1280-px-wide window.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from history.files import write_atomic
from history.health import Sample, read_samples
from reports.history_scan import DEFAULT_MAX_POINTS, HistoryScan, scan_history
from reports.html import Table, render_template, table, td
from reports.page import VERDICTS, as_dict, results_key, strength_of, versions_line
from reports.plots import (
    fates_missing,
    plot_depth,
    plot_fates,
    plot_latency,
    plot_placement,
    plot_priority_wait,
    plot_rate,
    priority_missing,
)
from reports.plots_health import CAPTION as HEALTH_CAPTION
from reports.plots_health import FILE_NAME as HEALTH_PNG
from reports.plots_health import HEADING as HEALTH_HEADING
from reports.plots_health import plot_health
from reports.plots_loss import CAPTION as LOSS_CAPTION
from reports.plots_loss import FILE_NAME as LOSS_PNG
from reports.plots_loss import HEADING as LOSS_HEADING
from reports.plots_loss import loss_missing, plot_loss
from reports.plots_promises import (
    metadata_missing,
    plot_metadata,
    plot_retry,
    plot_timeout,
    retry_missing,
    timeout_missing,
)
from reports.report_health import Health, health_data, main_phase
from reports.report_promises import promises_data
from reports.report_results import (
    anomalies_data,
    counts_data,
    other_checks_table,
    section_badges,
    verdict_sentence,
)
from reports.report_run import (
    LINKED_FILES,
    RunFiles,
    faults_data,
    files_data,
    list_run_files,
    spec_data,
)
from reports.report_strength import incidents_of

log = logging.getLogger(__name__)

REPORT_HTML = "report.html"
INDEX_HTML = "index.html"
# A run directory's name in the store: a UTC timestamp such as 20261122T192149.948531Z.
RUN_DIR_NAME = re.compile(r"^\d{8}T\d{6}(\.\d+)?Z$")

__all__ = [
    "LINKED_FILES",
    "REPORT_HTML",
    "Loaded",
    "PlotSpec",
    "RunFiles",
    "list_run_files",
    "load_json",
    "plot_specs",
    "render",
    "report_html",
    "store_root_of",
    "verdict_key",
]

_SECTIONS = ("counts", "anomalies", "incidents", "promises", "plots", "faults", "health", "test",
             "files")


def _nav(results: Any, health: bool = False) -> list[str]:
    """The page's section links; "incidents" and "promises" only when results.json has them,
    "health" only when the page has that section."""
    return [s for s in _SECTIONS if (s != "incidents" or incidents_of(results))
            and (s != "promises" or promises_data(results)) and (s != "health" or health)]


@dataclass(frozen=True)
class Loaded:
    """A JSON file of the run: whether it exists, its data, or why it could not be read."""

    data: Any = None
    present: bool = False
    error: str | None = None

    @property
    def ok(self) -> Any:
        """Returns the data when the file was read, else None."""
        return self.data if self.present and self.error is None else None


@dataclass(frozen=True)
class PlotSpec:
    """One plot of the report: its file name, heading, drawing function, a caption, why a
    scan has nothing to draw (None: always drawn), and the results.json section it belongs
    to (None: none; shown in that section's part of the page when results.json has it)."""

    file_name: str
    heading: str
    draw: Callable[[HistoryScan, Path, str], Path]
    caption: str
    missing: Callable[[HistoryScan], str | None]
    section: str | None = None


def plot_specs() -> list[PlotSpec]:
    """Returns the report's plots, in page order (read at call time, so tests can swap one)."""
    return [
        PlotSpec("latency.png", "Latency", plot_latency,
                 "Each completed client op: ok and fail at their invocation, unknown (info) "
                 "where it ended; log scale.", lambda _s: None),
        PlotSpec("rate.png", "Throughput", plot_rate,
                 "Completions per second by operation and outcome; deliveries dashed (acks, which "
                 "follow deliveries, not drawn).",
                 lambda _s: None),
        PlotSpec("fates.png", "Message fates", plot_fates,
                 "What the checker said became of the messages (results.json's fates), "
                 "by the time they were published: a row per fate, a bar per time bucket, each "
                 "row to its own scale (lost in red: confirmed, and a proven-complete drain "
                 "never read it); fault periods shaded; the sampled queue depth beneath.",
                 fates_missing),
        PlotSpec(LOSS_PNG, LOSS_HEADING, plot_loss, LOSS_CAPTION, loss_missing),
        PlotSpec("depth.png", "Queue depth", plot_depth,
                 "Messages ready and unacked in the queue, the largest count any node "
                 "reported at each sample; a cross marks a sample a node did not answer.",
                 lambda s: None if s.depth else 'no queue depth samples (f "depth" ops) in '
                 "the history"),
        PlotSpec("placement.png", "Queue leader", plot_placement,
                 "Which node led the queue (quorum leader or classic master) and which held "
                 "its other replicas, from the placement samples of the main phase.",
                 lambda s: None if s.placements else 'no queue placement samples '
                 '(f "placement" ops) in the history'),
        PlotSpec("priority.png", "Time to delivery by priority", plot_priority_wait,
                 "For a run whose publishers gave messages priorities: each message's time "
                 "from its confirm to its first delivery (log scale), by the priority it was "
                 "published with (no priority counts as 4 on RabbitMQ 4.3); fault periods "
                 "shaded. The priority section of the results judges the order.",
                 priority_missing, "priority"),
        PlotSpec("retry.png", "Delay of each return", plot_retry,
                 "Each return the checker sampled (results.json's delayed_retry.delays): the "
                 "time from a basic.reject to the message's next delivery, at the reject's "
                 "time, beside its least delay min(min x delivery count, max) less the "
                 "tolerance (a point under its dash came early), coloured by the checker's "
                 "outcome; fault periods shaded.", retry_missing, "delayed_retry"),
        PlotSpec("timeout.png", "How long each held message was held", plot_timeout,
                 "Each message a consumer held when the broker cancelled it (results.json's "
                 "consumer_timeout.held): the time from its delivery to that consumer to the "
                 "cancel, at the cancel's time, beside the timeout, coloured by what the "
                 "checker says became of it; fault periods shaded.", timeout_missing,
                 "consumer_timeout"),
        PlotSpec("metadata.png", "Metadata probe outcomes", plot_metadata,
                 "Per probed node (results.json's metadata.timeline), the buckets of time in "
                 "which its probe ops came back ok, refused with 541, failed otherwise or "
                 "unanswered, a lane each; fault periods shaded, heals dash-dotted.",
                 metadata_missing, "metadata"),
    ]


def load_json(path: Path) -> Loaded:
    """Takes a path. Returns its decoded JSON, or a Loaded saying it is absent or unreadable."""
    if not path.exists():
        return Loaded()
    try:
        return Loaded(json.loads(path.read_text(encoding="utf-8")), present=True)
    except (OSError, ValueError) as err:
        log.warning("cannot read %s: %s", path, err)
        return Loaded(present=True, error=str(err))


def verdict_key(results: Loaded) -> str:
    """Takes the loaded results. Returns "true", "weak" (valid but weak), "false", "unknown" or
    "unchecked"."""
    if not isinstance(results.ok, dict):
        return "unchecked"
    return results_key(results.data)


# --- sections -------------------------------------------------------------------------


@dataclass(frozen=True)
class Banner:
    """The verdict banner: its words and colour, the sentence saying why, each judging
    section's (name, verdict key), the strength line ("" for none) and whether it is weak."""

    text: str
    colour: str
    sentence: str
    checks: tuple[tuple[str, str], ...]
    strength: str
    weak: bool


def _banner(results: Loaded) -> Banner:
    key = verdict_key(results)
    text, colour = VERDICTS[key]
    if not results.present:
        sentence = verdict_sentence(None)
    elif results.error is not None:
        sentence = f"Not checked: results.json is unreadable ({results.error})."
    else:
        sentence = verdict_sentence(results.data)
    strength = strength_of(results.ok)
    return Banner(text, colour, sentence, tuple(section_badges(results.ok)),
                  strength.line() if strength is not None else "", key == "weak")


QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


@dataclass(frozen=True)
class LatencyRow:
    """One row of the latency table: an op and outcome, how many there were, their latency
    quantiles and max in ms, and whether those are results.json's own."""

    f: str
    outcome: str
    ops: int
    ms: dict[str, float]
    from_results: bool = False


def latency_rows(scan: HistoryScan, results: Any = None) -> list[LatencyRow]:
    """Takes the history scan and results.json's data (or None). Returns the latency table's
    rows, by op and outcome.

    One definition of a quantile for the whole run: confirmed publishes take results.json's
    numbers (perf.overall: exact, over every confirm); the other ops get the same nearest-rank
    quantile (checkers.model.nearest_rank) over the scan's sample of them.
    """
    from checkers.model import nearest_rank

    perf = results.get("perf") if isinstance(results, dict) else None
    found = perf.get("overall") if isinstance(perf, dict) else None
    overall: dict[str, Any] = found if isinstance(found, dict) else {}
    checked = overall.get("latency_ms")
    keys = ("p50", "p95", "p99", "max")
    rows = []
    for (f, t), res in sorted(scan.latency.items()):
        if (f, t) == ("publish", "ok") and isinstance(checked, dict) and all(
                isinstance(checked.get(k), int | float) for k in keys):
            rows.append(LatencyRow(f, t, int(overall.get("ok") or res.seen),
                                   {k: float(checked[k]) for k in keys}, from_results=True))
            continue
        ys = sorted(res.ys)
        if ys:
            ms = {k: nearest_rank(ys, q) for k, q in QUANTILES}
            rows.append(LatencyRow(f, t, res.seen, {**ms, "max": ys[-1]}))
    return rows


@dataclass(frozen=True)
class Latency:
    """The latency table and what its numbers are ("" to say nothing more)."""

    note: str
    table: Table


def latency_data(scan: HistoryScan, results: Any = None) -> Latency | None:
    """Takes the history scan and results.json's data. Returns the latency table, None when
    no client op completed."""
    rows = latency_rows(scan, results)
    if not rows:
        return None
    cells = [[td(r.f), td(r.outcome), td(f"{r.ops:,}", num=True),
              *(td(f"{r.ms[k]:,.1f}", num=True) for k in ("p50", "p95", "p99", "max"))]
             for r in rows]
    notes = []
    if any(r.from_results for r in rows):
        notes.append("confirmed publishes as results.json counts them (perf.overall), over "
                     "every confirm")
    if scan.latency_kept < scan.latency_seen:
        notes.append(f"the other ops from a sample of {scan.latency_kept:,} of "
                     f"{scan.latency_seen:,}")
    return Latency(f" ({'; '.join(notes)})" if notes else "",
                   table(["op", "outcome", "ops", "p50", "p95", "p99", "max"], cells,
                         num_cols=[2, 3, 4, 5, 6]))


def _latency_table(scan: HistoryScan, results: Any = None) -> str:
    """Takes what `latency_data` takes. Returns the latency table's HTML, "" without one."""
    found = latency_data(scan, results)
    return render_template("report/latency.html.j2", latency=found) if found is not None else ""


@dataclass(frozen=True)
class Plot:
    """One plot as the page shows it: its file and heading, and its caption when drawn or why
    it was not (`drawn` says which)."""

    file_name: str
    heading: str
    drawn: bool
    said: str


@dataclass(frozen=True)
class Plots:
    """The Plots section: whether there is a history, each plot, the latency table that
    follows the latency plot (None without one), and the plots shown in their results.json
    section's part of the page instead, by file name."""

    history: bool
    plots: tuple[Plot, ...] = ()
    latency: Latency | None = None
    figures: dict[str, Plot] = field(default_factory=dict)


def _plots(scan: HistoryScan | None, drawn: dict[str, str], skipped: dict[str, str],
           results: Any = None) -> Plots:
    """Takes the scan, the drawn plots' captions and why the others were not drawn, by file
    name, and results.json's content. Returns the Plots section: a plot of a section
    results.json has goes to that section (`figures`); one of a section it lacks is listed
    only when drawn."""
    sections = results if isinstance(results, dict) else {}
    listed, figures = [], {}
    for p in plot_specs():
        plot = (Plot(p.file_name, p.heading, True, drawn[p.file_name]) if p.file_name in drawn
                else Plot(p.file_name, p.heading, False, skipped.get(
                    p.file_name, "not drawn" if scan is not None else
                    "not drawn: there is no history.jsonl")))
        if p.section is not None and isinstance(sections.get(p.section), dict):
            figures[p.file_name] = plot
        elif p.section is None or plot.drawn:
            listed.append(plot)
    if scan is None:
        return Plots(False, figures=figures)
    return Plots(True, tuple(listed), latency_data(scan, results), figures)


def report_html(
    *,
    name: str,
    when: str,
    spec: Loaded,
    results: Loaded,
    scan: HistoryScan | None,
    images: Iterable[str],
    files: RunFiles,
    plot_errors: Iterable[str] = (),
    index_link: str | None = None,
    health_samples: Sequence[Sample] = (),
) -> str:
    """Takes the test name and time, the loaded test.json and results.json, the history scan
    (None without a history), the file names of the drawn plots, the run's files, why any plot
    could not be drawn, the relative link to the store's index (None: no link) and the
    harness's memory samples (health.jsonl).

    Returns the report page (templates/report.html.j2) as one HTML string.
    """
    drawn_names = list(images)
    captions = {s.file_name: s.caption for s in plot_specs()}
    drawn = {n: captions.get(n, n) for n in drawn_names}
    skipped: dict[str, str] = {}
    if scan is not None:
        for s in plot_specs():
            why = s.missing(scan)
            if why is not None:
                skipped[s.file_name] = why
    for err in plot_errors:
        file_name = err.split(":", 1)[0]
        skipped[file_name] = f"the plot failed: {err}"
    results_data = results.ok
    health = health_data(results_data, health_samples, spec.ok)
    # The broker's versions: test.json's, else results.json's (every key, as they grow).
    versions = as_dict(as_dict(spec.ok).get("versions")) or as_dict(
        as_dict(results_data).get("versions"))
    return render_template(
        "report.html.j2",
        title=f"{name} — {when}" if when else name,
        name=name,
        when=when,
        versions=versions_line(versions),
        index_link=index_link,
        nav=_nav(results_data, health is not None),
        banner=_banner(results),
        counts=counts_data(results_data),
        anomalies=anomalies_data(results_data),
        promises=promises_data(results_data),
        plots=_plots(scan, drawn, skipped, results_data),
        faults=faults_data(scan, results_data),
        health=health,
        health_plot=_health_plot(health, drawn_names, skipped),
        test=spec_data(spec.data, spec.error, spec.present, scan, results_data),
        other=other_checks_table(results_data),
        files=files_data(files, drawn_names),
    )


def _health_plot(health: Health | None, drawn: Sequence[str],
                 skipped: dict[str, str]) -> Plot | None:
    """Takes the Health section (None: none), the drawn plots' file names and why plots were
    not drawn. Returns the memory plot as the section shows it (None without the section)."""
    if health is None:
        return None
    if HEALTH_PNG in drawn:
        return Plot(HEALTH_PNG, HEALTH_HEADING, True, HEALTH_CAPTION)
    return Plot(HEALTH_PNG, HEALTH_HEADING, False,
                skipped.get(HEALTH_PNG, "not drawn: health.jsonl holds no memory sample"))


def _draw_health(run_dir: Path, samples: Sequence[Sample], spec: Loaded,
                 scan: HistoryScan | None, name: str) -> tuple[Path | None, str | None]:
    """Takes the run directory, its memory samples, its test.json, its scan and its name.
    Returns the memory plot's path (None when there are no samples or it failed) and why it
    failed (None)."""
    if not samples:
        return None, None
    try:
        return plot_health(samples, main_phase(spec.ok), scan, run_dir / HEALTH_PNG, name), None
    except Exception as err:  # a plot that cannot be drawn must not cost the page
        log.exception("cannot draw %s", HEALTH_PNG)
        return None, f"{HEALTH_PNG}: {type(err).__name__}: {err}"


def _name_and_time(run_dir: Path, spec: Loaded) -> tuple[str, str]:
    data = spec.data if isinstance(spec.data, dict) else {}
    name = data.get("name") or run_dir.resolve().parent.name or "test"
    when: Any = None
    for key in ("start_time", "started_at", "start", "timestamp", "time"):
        if isinstance(data.get(key), str | int | float) and not isinstance(data.get(key), bool):
            when = data[key]
            break
    stamp = run_dir.resolve().name
    text = f"run {stamp}, started {when}" if when is not None else f"run {stamp}"
    return str(name), text


def store_root_of(run_dir: Path) -> Path | None:
    """Takes a run directory. Returns the store it sits in (`<store>/<test>/<timestamp>`), or
    None when its name is not a run timestamp."""
    run_dir = Path(run_dir).resolve()
    if RUN_DIR_NAME.match(run_dir.name) and run_dir.parent.name not in ("", "matrix"):
        return run_dir.parent.parent
    return None


def _draw_plots(scan: HistoryScan, run_dir: Path, name: str) -> tuple[list[Path], list[str]]:
    """Takes a history's scan, the run directory and the run's name. Returns the plots drawn
    (those with data) and one line for each that could not be: a plot that cannot be drawn
    must not cost the page."""
    written: list[Path] = []
    errors: list[str] = []
    for p in plot_specs():
        if p.missing(scan) is not None:
            continue
        try:
            written.append(p.draw(scan, run_dir / p.file_name, name))
        except Exception as err:
            log.exception("cannot draw %s", p.file_name)
            errors.append(f"{p.file_name}: {type(err).__name__}: {err}")
    return written, errors


def render(
    run_dir: Path, *, max_points: int = DEFAULT_MAX_POINTS, seed: int = 0, index: bool = True
) -> list[Path]:
    """Takes a run directory (and the latency sample size and seed, and whether to rewrite the
    store's index).

    Returns the paths written into the run directory: the plots that have data when there is a
    history.jsonl, and report.html. test.json and results.json may be missing. A plot or an
    index that cannot be written is logged and noted on the page, never raised.
    """
    run_dir = Path(run_dir)
    spec = load_json(run_dir / "test.json")
    results = load_json(run_dir / "results.json")
    name, when = _name_and_time(run_dir, spec)
    scan: HistoryScan | None = None
    history = run_dir / "history.jsonl"
    if history.is_file():
        scan = scan_history(history, max_points=max_points, seed=seed)
        written, plot_errors = _draw_plots(scan, run_dir, name)
    else:
        log.warning("no history at %s; report without plots", history)
        written, plot_errors = [], []
    samples = read_samples(run_dir)
    drawn_health, failed = _draw_health(run_dir, samples, spec, scan, name)
    written += [drawn_health] if drawn_health is not None else []
    plot_errors += [failed] if failed is not None else []
    store = store_root_of(run_dir) if index else None

    def page_with(index_link: str | None) -> str:
        return report_html(
            name=name,
            when=when,
            spec=spec,
            results=results,
            scan=scan,
            images=[p.name for p in written],
            plot_errors=plot_errors,
            files=list_run_files(run_dir),
            index_link=index_link,
            health_samples=samples,
        )

    out = run_dir / REPORT_HTML
    write_atomic(out, page_with("../../" + INDEX_HTML if store is not None else None))
    if store is not None:
        from reports.index import write_index

        try:
            write_index(store)
        except Exception:  # the run's own page matters more than the store's list
            log.exception("cannot rewrite the store index in %s", store)
            if not (store / INDEX_HTML).exists():
                write_atomic(out, page_with(None))  # no dangling link to a missing index
    written.append(out)
    log.info("report for %s: %s", run_dir, ", ".join(p.name for p in written))
    return written

