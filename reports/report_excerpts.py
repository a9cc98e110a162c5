"""Per-message tables that link their broker-log excerpt instead of repeating it in every row.

results.json's per-message details (`queue.details`, harness.explain.readable) carry, per
message, the broker log lines of its stretch: messages of one stretch carry the same 20
lines. A table of them (the recovered messages, "seen, but not counted") would print that
excerpt row after row. Here each row's "broker log" cell becomes a link: to the incident whose
examples hold the message (the incident shows its log lines once), else to the excerpt, shown
once below the table, that the rows sharing it link to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from reports.page import as_dict
from reports.report_strength import incident_anchor, incidents_of

LOG_COLUMN: Final = "broker log"
# A log cell saying there was nothing to show: kept as it is, never an excerpt.
NOTHING: Final = ("", "none found", "-")


@dataclass(frozen=True)
class LogLink:
    """A row's link to its broker log: the anchor on the page and the link's text."""

    anchor: str
    label: str


@dataclass(frozen=True)
class Excerpt:
    """A broker-log excerpt shown once: its anchor, its heading and its lines."""

    anchor: str
    label: str
    lines: tuple[str, ...]


def _rows(details: Any) -> list[Any] | None:
    """Takes per-message details (a list of objects, or a map id -> object). Returns them as a
    list, None for another shape."""
    if isinstance(details, dict):
        return [{"id": k, **(v if isinstance(v, dict) else {"detail": v})}
                for k, v in details.items()]
    return details if isinstance(details, list) else None


def incident_links(results: Any) -> dict[str, LogLink]:
    """Takes results.json's content. Returns, per example id of an incident (any class), the
    link to that incident (the first holding it)."""
    out: dict[str, LogLink] = {}
    for i, x in enumerate(incidents_of(results) or []):
        anchor = incident_anchor(x, i)
        for ids in as_dict(x.get("examples")).values():
            for mid in ids if isinstance(ids, list) else []:
                out.setdefault(str(mid), LogLink(anchor, anchor.replace("-", " ")))
    return out


def linked_details(results: Any, name: str, details: Any,
                   shown: int) -> tuple[Any, tuple[Excerpt, ...]]:
    """Takes results.json's content, an anomaly class's name, its per-message details and how
    many rows the table shows. Returns the details with the shown rows' broker-log text
    replaced by a LogLink (to its incident, else to its excerpt), and the excerpts those links
    point to, each once, in the order the rows first name them. Details without that column
    come back as they were."""
    rows = _rows(details)
    if not rows or not any(isinstance(d, dict) and LOG_COLUMN in d for d in rows):
        return details, ()
    incidents = incident_links(results)
    excerpts: dict[str, Excerpt] = {}
    out = []
    for d in rows[:shown]:
        text = d.get(LOG_COLUMN) if isinstance(d, dict) else None
        if not isinstance(text, str) or text.strip() in NOTHING:
            out.append(d)
            continue
        link = incidents.get(str(d.get("id")))
        if link is None:
            if text not in excerpts:
                n = len(excerpts) + 1
                excerpts[text] = Excerpt(f"log-{name}-{n}", f"broker log excerpt {n}",
                                         tuple(x.strip() for x in text.split(" | ")))
            link = LogLink(excerpts[text].anchor, excerpts[text].label)
        out.append({**d, LOG_COLUMN: link})
    return out + rows[shown:], tuple(excerpts.values())
