"""The lost messages told apart, as the report shows them under the lost block: which publisher
lost which stretch of its confirmed messages, and which node (in which role) had confirmed them.

It reads results.json's `queue.loss` (checkers.loss has the definitions) and judges nothing;
results without it (checked before it existed, or nothing lost) show nothing here.
"""

from __future__ import annotations

from typing import Any

from reports.html import Note, Table, table, td
from reports.page import as_dict

MAX_RUNS_SHOWN = 6


def _run(r: Any) -> str:
    r = as_dict(r)
    first, last = r.get("first_seq"), r.get("last_seq")
    seqs = f"seq {first}" if first == last else f"seq {first}-{last}"
    return f"{r.get('kind', '?')} {seqs} ({r.get('count', '?')})"


def _runs(p: dict[str, Any]) -> str:
    got = p.get("runs")
    runs: list[Any] = got if isinstance(got, list) else []
    said = "; ".join(_run(r) for r in runs[:MAX_RUNS_SHOWN])
    more = int(p.get("runs_count") or len(runs)) - min(len(runs), MAX_RUNS_SHOWN)
    return said + (f"; {more:,} more runs" if more > 0 else "")


def publishers_table(loss: dict[str, Any]) -> Table | None:
    """Takes queue.loss. Returns a row per publisher: confirmed, lost, its lost runs."""
    pubs = [as_dict(p) for p in loss.get("publishers") or []]
    if not pubs:
        return None
    rows = [[td(p.get("publisher")), td(p.get("confirmed"), num=True),
             td(p.get("lost"), num=True), td(_runs(p))] for p in pubs]
    total = loss.get("publishers_count")
    return table(["publisher", "confirmed", "lost", "lost runs of its confirmed sequence"],
                 rows, total if isinstance(total, int) else None, num_cols=(1, 2))


# How a row's `side` reads (checkers.loss: which side of a partition its node was on).
SIDES = {"minority": "minority side (cut off from a majority)", "majority": "majority side",
         None: "no partition"}


def nodes_table(loss: dict[str, Any]) -> Table | None:
    """Takes queue.loss. Returns a row per confirming node, its role then and, where the
    results say it (`side`), which side of a partition it was on then: how many."""
    nodes = [as_dict(n) for n in loss.get("by_node") or []]
    if not nodes:
        return None
    sided = any("side" in n for n in nodes)  # results from before sides were told: no column
    return table(["confirmed by", "its role then", *(["its side then"] if sided else []), "lost"],
                 [[td(n.get("node")), td(n.get("role")),
                   *([td(SIDES.get(n.get("side"), str(n.get("side"))))] if sided else []),
                   td(n.get("count"), num=True)]
                  for n in nodes], num_cols=(3 if sided else 2,))


def loss_parts(queue: dict[str, Any]) -> tuple[Note | Table, ...]:
    """Takes the queue section. Returns what the lost block shows of queue.loss: a note on the
    unsequenced ones and the placement samples, the publishers' runs and the confirming nodes;
    () without it."""
    loss = queue.get("loss")
    if not isinstance(loss, dict):
        return ()
    parts: list[Note | Table | None] = [publishers_table(loss), nodes_table(loss)]
    if not loss.get("placements_observed"):
        parts.append(Note("No placement sample in the history: the confirming nodes' roles "
                          "are unknown."))
    n = loss.get("unsequenced_count")
    if isinstance(n, int) and n > 0:
        parts.append(Note(f"{n:,} lost ids are not <publisher>-<seq>: in no run."))
    return tuple(p for p in parts if p is not None)
