"""What a run's outcome says beyond its verdict: a run whose runner raised, and infrastructure failures.

A campaign (the nightly, explore, shrink) runs one test after another through
a function the CLI hands in; `Crashed` stands for the outcome of one that
raised instead of returning, so that one broken run never ends the campaign.
`infrastructure_failure` tells a run that failed for infrastructure reasons
(the cluster would not start, a node never recovered, a backend or harness
error) from one that tested what it meant to, for every campaign alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Crashed:
    """The outcome of a run whose runner raised instead of returning one."""

    error: str
    run_dir: Path | str = ""
    results: dict[str, Any] | None = None
    interrupted: bool = False
    phase_times: dict[str, float] = field(default_factory=dict)
    crashed: bool = True


def infrastructure_failure(outcome: Any) -> str | None:
    """Takes a RunOutcome. Returns why the run failed for infrastructure reasons (the cluster
    would not start, a node never recovered, a backend or harness error), or None when it
    tested what it meant to (an interrupted run is not a failure of the infrastructure)."""
    if getattr(outcome, "interrupted", False):
        return None
    error = getattr(outcome, "error", None)
    if getattr(outcome, "crashed", False):
        return f"harness error: {error}"
    phases = getattr(outcome, "phase_times", None) or {}
    if error and "setup" not in phases:
        return f"the cluster would not start: {error}"
    results = getattr(outcome, "results", None) or {}
    problems = (results.get("run") or {}).get("problems") or ()
    if any("did not recover" in str(p) for p in problems):
        return "the cluster did not recover after the faults (a node never came back)"
    if error:
        return f"harness or backend error: {error}"
    return None
