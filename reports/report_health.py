"""The harness's own health over a run, as the report shows it: results.json's `health` section
and the samples of health.jsonl.

harness.health samples the harness's memory every 10 s into the run directory's
health.jsonl (one JSON object a line: `at_unix`, the controller's resident
memory `controller_rss` and its workers' `workers_rss` in bytes, and how many
`workers`), and the check judges it in results.json's `health` section: the
memory over the main phase flat, grew or unknown (its least-squares slope and
the growth it makes), the history complete or not, and the verdict's delay
after the main phase, within its bound or not. `read_samples` reads the
samples (a torn line left out); `health_data` makes the page's Health section:
those three judgements as results.json words them, and the memory of the
controller, of its workers and of both at the main phase's first and last
sample, at their peak and their slope, as results.json gives them (its
`by_process`). One judge: every judgement and figure is results.json's; only
for a check older than `by_process` do the samples give each process's first,
last and peak (no slope), and never a verdict; a field missing shows as
missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from history.health import Sample
from reports.html import Table, badge_td, table, td, th
from reports.page import NA, as_dict

# results.json's memory judgement -> (the badge's verdict key, its words).
MEMORY_BADGES: dict[str, tuple[str, str]] = {"flat": ("true", "flat"), "grew": ("false", "grew")}


@dataclass(frozen=True)
class MainPhase:
    """The main phase on the wall clock (unix s; None: unknown) and the history's time 0."""

    start: float | None
    end: float | None
    origin: float | None

    @property
    def known(self) -> bool:
        """Returns whether both the start and the end are known."""
        return self.start is not None and self.end is not None


def _unix(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def main_phase(test_info: Any) -> MainPhase:
    """Takes test.json's content. Returns its main phase (`main_started_unix`,
    `main_ended_unix`) and the history's time 0 (`history_start_unix`)."""
    info = as_dict(test_info)
    return MainPhase(_unix(info.get("main_started_unix")), _unix(info.get("main_ended_unix")),
                     _unix(info.get("history_start_unix")))


def in_main_phase(samples: Sequence[Sample], phase: MainPhase) -> list[Sample]:
    """Takes the samples and the main phase. Returns those within it, ends included (as the
    health section judges them); [] when the phase is unknown."""
    if not phase.known:
        return []
    return [s for s in samples if phase.start <= s.at_unix <= phase.end]  # type: ignore[operator]


@dataclass(frozen=True)
class Health:
    """The Health section: the memory's badge key and words, one sentence, the judgements'
    table (memory, history, verdict), the memory table (None: no figure) and where its
    figures come from, and notes."""

    key: str
    memory: str
    sentence: str
    judgements: Table
    memory_table: Table | None
    memory_source: str = ""
    notes: tuple[str, ...] = ()


def _mb(x: Any) -> str:
    return f"{x:,.1f}" if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else NA


def _yes_no(x: Any, yes: str, no: str) -> tuple[str, str]:
    """Takes a judgement (True, False or anything else: unknown). Returns its badge key and
    words."""
    if x is True:
        return "true", yes
    if x is False:
        return "false", no
    return "unknown", "unknown"


def _memory_row(h: Mapping[str, Any], phase: MainPhase) -> list[Any]:
    key, words = MEMORY_BADGES.get(str(h.get("memory")), ("unknown", "unknown"))
    span = (f" of {phase.end - phase.start:,.0f} s" if phase.known  # type: ignore[operator]
            else "")
    if key == "unknown":
        said = str(h.get("memory_reason") or "results.json says no more")
    else:
        said = (f"least-squares slope {_mb(h.get('slope_mb_per_h'))} MiB/h, a growth of "
                f"{_mb(h.get('growth_mb'))} MiB over the main phase{span} "
                f"({_mb(h.get('first_mb'))} -> {_mb(h.get('last_mb'))} MiB, peak "
                f"{_mb(h.get('max_mb'))} MiB; {_n(h.get('samples'))} samples, at most "
                f"{_n(h.get('most_workers'))} worker process(es))")
    return [th("memory"), badge_td(key, words), td(said)]


def _history_row(h: Mapping[str, Any]) -> list[Any]:
    key, words = _yes_no(h.get("history_complete"), "complete", "incomplete")
    said = (f"history.jsonl holds {_n(h.get('history_lines'))} line(s) of the "
            f"{_n(h.get('history_ops'))} op(s) the run wrote")
    return [th("history"), badge_td(key, words), td(said)]


def _verdict_row(h: Mapping[str, Any]) -> list[Any]:
    key, words = _yes_no(h.get("verdict_in_time"), "in time", "late")
    delay = h.get("verdict_after_main_s")
    said = (f"the verdict came {_mb(delay)} s after the main phase's end (bound "
            f"{_mb(h.get('verdict_bound_s'))} s)" if _unix(delay) is not None
            else "the verdict's delay after the main phase was not recorded")
    return [th("verdict"), badge_td(key, words), td(said)]


def _process_row(label: str, figures: Mapping[str, Any]) -> list[Any]:
    """Takes a row's label and its figures (first_mb, last_mb, max_mb, slope_mb_per_h; a
    missing one shows as missing). Returns the memory table's row."""
    return [th(label), *(td(_mb(figures.get(k)), num=True)
                         for k in ("first_mb", "last_mb", "max_mb", "slope_mb_per_h"))]


def _from_samples(inside: Sequence[Sample], of: Any) -> dict[str, float]:
    """Takes the main phase's samples and which memory of a sample (MiB). Returns its first,
    last and most, no slope (results.json's alone, from a check that gives it)."""
    values = [of(s) for s in inside]
    return {"first_mb": values[0], "last_mb": values[-1], "max_mb": max(values)}


def memory_table(h: Mapping[str, Any], inside: Sequence[Sample]) -> tuple[Table | None, str]:
    """Takes the health section and the samples of the main phase. Returns the memory (MiB) of
    the controller, of its workers and of both at the phase's first and last sample, their
    peak and their slope (MiB/h), and where they come from: results.json's (`by_process` and
    the section's own for both), else, for a check older than `by_process`, each process's
    from the samples, without a slope. None without either."""
    by = as_dict(h.get("by_process"))
    both = _process_row("harness (both)", h)
    if by:
        rows = [_process_row("controller", as_dict(by.get("controller"))),
                _process_row("workers", as_dict(by.get("workers"))), both]
        said = "results.json's, each process apart and both together as judged"
    elif inside:
        rows = [_process_row("controller", _from_samples(inside, lambda s: s.controller_mb)),
                _process_row("workers", _from_samples(inside, lambda s: s.workers_mb)), both]
        said = ("each process's from health.jsonl's samples within it (results.json gives no "
                "figure per process: checked before it did), both together as results.json "
                "judges them")
    else:
        return None, ""
    return table(["process", "first sample (MiB)", "last sample (MiB)", "peak (MiB)",
                  "slope (MiB/h)"], rows, num_cols=[1, 2, 3, 4]), said


def health_data(results: Any, samples: Sequence[Sample], test_info: Any) -> Health | None:
    """Takes results.json's content, health.jsonl's samples and test.json's content. Returns
    the Health section, None when results.json has no health section and there is no sample
    (a run before the sampler)."""
    h = as_dict(as_dict(results).get("health"))
    if not h and not samples:
        return None
    phase = main_phase(test_info)
    inside = in_main_phase(samples, phase)
    notes = []
    if not h:
        notes.append("results.json has no health section (checked before it had one, or not "
                     "checked): the samples are shown, nothing is judged; check the run again")
    if samples and not inside:
        notes.append("no memory sample lies within the main phase" if phase.known else
                     "test.json does not say when the main phase began and ended")
    key, words = MEMORY_BADGES.get(str(h.get("memory")), ("unknown", "unknown"))
    sentence = (f"Memory {words} over the main phase; history "
                f"{_yes_no(h.get('history_complete'), 'complete', 'incomplete')[1]}; verdict "
                f"{_yes_no(h.get('verdict_in_time'), 'in time', 'late')[1]}. The harness's own "
                "health, as results.json judges it: information, never part of the verdict."
                if h else "Not judged: results.json has no health section.")
    judgements = table(["health", "results.json", "figures"],
                       [_memory_row(h, phase), _history_row(h), _verdict_row(h)])
    figures, source = memory_table(h, inside)
    return Health(key, words, sentence, judgements, figures, source, tuple(notes))
