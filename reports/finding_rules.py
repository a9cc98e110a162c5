"""Which rule a finding broke: its anomaly kinds, headline first, in words, with RabbitMQ's
documentation as results.json quotes it.

`finding_kinds` lists what a run's results hold against it (the queue section's
anomalies, the ordering section's violations, any other section judged false),
the headline first: loss before a message nobody sent, an acknowledged message
handed out again as new before a plain unflagged duplicate, and so on (RULES'
order). `broken` says the headline rule in a few words for a title (a consumer
timeout's stalled hand-over, when it is the section's only violation, in its
own words);
`quotations` returns the paragraphs results.json carries for a kind (the
checker's own `explanations`, which quote RabbitMQ's guides), never words of
ours; `shows` tells whether another run of a series shows a kind, from its
results, else from its matrix row's counts, else not at all (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reports.page import as_dict
from reports.report_results import findings


@dataclass(frozen=True)
class Rule:
    """One kind of finding: its results.json name, the rule it breaks in a few words (a title's
    words), and the matrix row's count of it (None: a row alone cannot tell it)."""

    kind: str
    broken: str
    row_count: str | None = None


# Headline order: the first kind a run shows names its finding.
RULES: dict[str, Rule] = {r.kind: r for r in (
    Rule("lost", "confirmed messages lost", "lost"),
    Rule("unexpected", "messages delivered that were never published", "unexpected"),
    Rule("unflagged_after_ack",
         "an acknowledged message delivered again without the redelivered flag"),
    Rule("unflagged_duplicated", "a message delivered again without the redelivered flag",
         "unflagged_duplicated"),
    Rule("unflagged_redelivered",
         "a message delivered again without the redelivered flag, its earlier delivery acked "
         "or not"),
    Rule("lost_unacked",
         "confirmed messages delivered, never acknowledged and never delivered again"),
    Rule("redelivered_duplicated", "messages delivered again (flagged), counted against the run "
         "by its check"),
    Rule("ordering", "messages of one publisher delivered out of publish order",
         "ordering_violations"),
    Rule("priority", "a message handed out while a confirmed one of a higher priority was "
         "ready"),
    Rule("delayed_retry", "a returned message (rejected, nacked, or lost with its consumer) "
         "back before its delay, unflagged, past its delivery limit, or gone"),
    Rule("consumer_timeout", "a timed-out consumer fed after its cancel (or its channel's "
         "close), what it held not back flagged nor dead-lettered, or a single active "
         "consumer's queue not handed over within the bound"),
    Rule("metadata", "a node cut off with a minority did not serve metadata again in time "
         "after the heal"),
)}
# The ordering rule as the check judged it: (strict, single active consumer) -> words.
ORDERING_BROKEN: dict[tuple[bool, bool], str] = {
    (True, True): "strict FIFO broken under a single active consumer",
    (True, False): "strict FIFO broken",
}
# A consumer-timeout finding whose only violation is a stalled hand-over, in words.
HAND_OVER_BROKEN = ("a single active consumer's queue not handed over within the bound after "
                    "the broker ended its active consumer")
# The liveness section's rules, in words: a stuck publish, a stuck consumer, or the cluster not
# serving again after the last heal.
LIVENESS_BROKEN: dict[str, str] = {
    "publish": "a publish left neither confirmed nor nacked past the bound after a heal on a "
               "channel that stayed open",
    "consumer": "a consumer that stayed subscribed not fed again past the bound after a heal "
                "while its queue held ready messages",
    "resumed": "the cluster did not confirm or deliver again within the bound after the last "
               "heal",
}
# Sections that judge the harness's own run, not the broker.
NOT_BROKER = ("run",)


def finding_kinds(results: Any) -> list[str]:
    """Takes results.json's content. Returns the kinds that count against the run, headline
    first (RULES' order, then any other section judged false, by name)."""
    kinds = [k.name for k, _n in findings(results)]
    kinds += sorted(name for name, s in as_dict(results).items()
                    if isinstance(s, dict) and s.get("valid") is False
                    and name not in ("queue", "ordering", *NOT_BROKER) and name not in kinds)
    order = {k: i for i, k in enumerate(RULES)}
    return sorted(dict.fromkeys(kinds), key=lambda k: (order.get(k, len(order)), k))


def count_of(kind: str, results: Any) -> int | None:
    """Takes a kind and results.json's content. Returns how many of it the run counted (None:
    its section counts nothing by that name)."""
    r = as_dict(results)
    section = as_dict(r.get(kind)) or as_dict(r.get("queue"))
    key = "violation_count" if kind in r else f"{kind}_count"
    n = section.get(key)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def broken(kind: str, results: Any, spec: Any) -> str:
    """Takes a kind, results.json's content and test.json's spec. Returns the rule it broke in
    a few words ("strict FIFO broken under a single active consumer")."""
    if kind == "ordering":
        strict = as_dict(as_dict(results).get("ordering")).get("strict") is True
        sac = as_dict(as_dict(spec).get("queue")).get("single_active_consumer") is True
        found = ORDERING_BROKEN.get((strict, sac))
        if found:
            return found
    if kind == "consumer_timeout" and _only_stalled(results):
        return HAND_OVER_BROKEN
    if kind == "liveness":
        return _liveness_broken(results)
    rule = RULES.get(kind)
    return rule.broken if rule else f"the {kind.replace('_', ' ')} check failed"


def _liveness_broken(results: Any) -> str:
    """Takes results.json's content. Returns the liveness rule it broke in words: a stuck
    publish or consumer after a heal (its settlement part), else the cluster not serving again
    within the bound."""
    settlement = as_dict(as_dict(as_dict(results).get("liveness")).get("settlement"))
    found = [k for k, key in (("publish", "stuck_channels"), ("consumer", "stuck_consumers"))
             if isinstance(settlement.get(key), int) and settlement[key] > 0]
    words = [LIVENESS_BROKEN[k] for k in found]
    return " and ".join(words) if words else LIVENESS_BROKEN["resumed"]


def _only_stalled(results: Any) -> bool:
    """Takes results.json's content. Returns whether its consumer-timeout section counts a
    stalled hand-over and no other violation."""
    v = as_dict(as_dict(as_dict(results).get("consumer_timeout")).get("violations"))
    bad = {k for k, n in v.items() if isinstance(n, int) and not isinstance(n, bool) and n > 0}
    return bad == {"stalled"}


def quotations(kind: str, results: Any) -> list[str]:
    """Takes a kind and results.json's content. Returns the paragraphs results.json carries
    for it: the queue section's explanation of the kind, else its own section's explanations
    (every one, in order) or explanation; [] when it carries none."""
    r = as_dict(results)
    queue = as_dict(as_dict(r.get("queue")).get("explanations"))
    if isinstance(queue.get(kind), str):
        return [queue[kind]]
    section = as_dict(r.get(kind))
    own = section.get("explanations")
    if isinstance(own, dict):
        return [str(v) for v in own.values() if isinstance(v, str) and v.strip()]
    if isinstance(own, list):
        return [str(v) for v in own if isinstance(v, str) and v.strip()]
    one = section.get("explanation")
    return [one] if isinstance(one, str) and one.strip() else []


def shows(kind: str, results: Any, row: Any) -> bool | None:
    """Takes a kind, a run's results (None when gone) and its matrix row (a dict). Returns
    whether the run shows the kind: from its results, else from its row (a valid run shows
    nothing; an invalid one by the row's count of the kind), else None (cannot tell)."""
    if isinstance(results, dict):
        return kind in finding_kinds(results)
    row = as_dict(row)
    if row.get("valid") is True:
        return False
    rule = RULES.get(kind)
    n = row.get(rule.row_count) if rule is not None and rule.row_count else None
    if row.get("valid") is False and isinstance(n, int) and not isinstance(n, bool):
        return n > 0
    return None
