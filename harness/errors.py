"""The root of every error the harness raises, so a caller can catch the room's failures.

`HarnessError` is the base. Below it: `harness.spec.SpecError` (a test spec that cannot run;
`harness.scenario_file.ScenarioFileError` for a scenario file), `harness.runner.Interrupted`
(the run was asked to stop) and `harness.cli.UsageError` (a command-line mistake). Each keeps
the built-in base it had (ValueError), so what caught it before still does.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error of harness/."""
