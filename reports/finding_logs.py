"""The broker's log lines of a finding: each incident holding an example, once, with its evidence.

results.json's `incidents` group a run's anomalies by the faults that caused
them, each with the log lines read from the nodes (`log_lines`: time, node,
what, text, evidence "n3/rabbit.log:364"). `log_section` writes each incident
that holds an example message once: its summary, its timeline (rows that
repeat a log line's text are left out, the line shows below), the table of its
log lines by evidence, and the lines themselves verbatim from the node's log
(nodes/n3/rabbit.log, or nodes/n3-rabbit.log.gz as archived findings keep
them; the incident's own text where the file is gone). Results of an older
check hold no incidents: then the distinct lines the per-message details name
are shown, each once.
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from reports import markdown as md
from reports.finding_examples import DETAIL_LOG
from reports.page import as_dict
from reports.report_strength import incident_title, incidents_of


def read_lines(path: Path) -> list[str]:
    """Takes a node log (plain or .gz). Returns its lines ([] when unreadable)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
                return fh.read().splitlines()
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def log_files(nodes_dir: Path, evidence_file: str) -> list[Path]:
    """Takes nodes/ and an evidence's file ("n3/rabbit.log"). Returns where that file may be:
    as the run stored it, compressed, or flattened and compressed as archived."""
    node, _, name = evidence_file.partition("/")
    return [nodes_dir / evidence_file, nodes_dir / f"{evidence_file}.gz",
            nodes_dir / f"{node}-{name}.gz", nodes_dir / f"{node}-{name}"]


class NodeLogs:
    """The nodes' logs of a run, each read once when first asked for."""

    def __init__(self, nodes_dir: Path) -> None:
        self.nodes_dir = nodes_dir
        self._read: dict[str, list[str]] = {}

    def line(self, evidence: str) -> str | None:
        """Takes an evidence ("n3/rabbit.log:364"). Returns that line of the node's log, or
        None when the file or the line is not there."""
        file, _, number = evidence.rpartition(":")
        if not file or not number.isdigit():
            return None
        if file not in self._read:
            found = next((p for p in log_files(self.nodes_dir, file) if p.is_file()), None)
            self._read[file] = read_lines(found) if found is not None else []
        lines = self._read[file]
        n = int(number)
        return lines[n - 1] if 0 < n <= len(lines) else None


def log_section(nodes_dir: Path, results: dict[str, Any], positions: Collection[int],
                ids: Sequence[str]) -> list[str]:
    """Takes nodes/, results.json's content, the positions of the incidents holding the
    examples and the examples' ids. Returns the section's Markdown."""
    lines = ["## The broker's log lines", ""]
    incidents = incidents_of(results)
    logs = NodeLogs(nodes_dir)
    if incidents is None:
        return lines + _from_details(results, ids)
    chosen = [(pos, inc) for pos, inc in enumerate(incidents) if pos in positions]
    if not chosen:
        return [*lines, "No incident of results.json holds an example message.", ""]
    seen: set[str] = set()
    for pos, inc in chosen:
        lines += _incident(pos, inc, logs, seen)
    return lines


def _incident(pos: int, inc: dict[str, Any], logs: NodeLogs, seen: set[str]) -> list[str]:
    """Takes an incident, its position, the nodes' logs and the evidences shown already.
    Returns its Markdown, each log line once."""
    entries = [as_dict(x) for x in inc.get("log_lines") or []]
    entries = [e for e in entries if str(e.get("evidence") or e.get("text")) not in seen]
    seen.update(str(e.get("evidence") or e.get("text")) for e in entries)
    texts = [str(e.get("text") or "") for e in entries if e.get("text")]
    lines = [f"### {md.text(incident_title(inc, pos))}", ""]
    steps = [as_dict(x) for x in inc.get("timeline") or []]
    steps = [x for x in steps if not any(t and t in str(x.get("text") or "") for t in texts)]
    if steps:
        rows = [[_s(x.get("at_ms")), md.text(x.get("what") or ""), md.text(x.get("node") or ""),
                 md.text(x.get("text") or "")] for x in steps]
        lines += ["Its timeline (results.json):", "",
                  *md.table(("at (s)", "what", "node", "text"), rows), ""]
    if not entries:
        return [*lines, "Its log lines are shown above already, or it has none.", ""]
    rows = [[f"{e['t_s']:.3f}" if isinstance(e.get("t_s"), int | float) else "",
             md.text(e.get("node") or ""), md.text(e.get("label") or ""),
             md.code(e.get("evidence") or "not given")] for e in entries]
    raw = [_raw(e, logs) for e in entries]
    return [*lines, *md.table(("t (s)", "node", "what", "evidence"), rows), "",
            "The lines, in that order (verbatim from the node's log where it is stored):", "",
            *md.fence(raw), ""]


def _raw(entry: dict[str, Any], logs: NodeLogs) -> str:
    """Takes one log_lines entry. Returns "evidence: the line as logged", else its text."""
    evidence = str(entry.get("evidence") or "")
    text = str(entry.get("text") or "")
    found = logs.line(evidence) if evidence else None
    if found is not None and text[:40] in found:
        return f"{evidence}: {found}"
    return f"{evidence or 'no evidence'}: {text} (the node's log line is not stored)"


def _from_details(results: dict[str, Any], ids: Sequence[str]) -> list[str]:
    """Takes results.json of an older check (no incidents) and the examples' ids. Returns the
    distinct log lines their details name, each once."""
    found: dict[str, None] = {}
    details = as_dict(as_dict(results.get("queue")).get("details"))
    for entries in details.values():
        for d in entries if isinstance(entries, list) else []:
            if isinstance(d, dict) and str(d.get("id")) in ids and d.get(DETAIL_LOG):
                found.update(dict.fromkeys(x.strip() for x in str(d[DETAIL_LOG]).split(" | ")))
    if not found:
        return ["results.json holds neither incidents nor log lines for these messages.", ""]
    return ["results.json groups no incidents (an older check); the log lines its per-message "
            "details name, each once:", "", *md.fence(found), ""]


def _s(ms: Any) -> str:
    return f"{float(ms) / 1000:.3f}" if isinstance(ms, int | float) else ""
