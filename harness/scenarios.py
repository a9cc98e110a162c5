"""Named scenarios: complete test specs, each with the outcome RabbitMQ's documentation leads us to expect.

`scenario(name)` returns the spec; the CLI's `--scenario NAME` starts from it
and further options override it. `make test-<name>` runs one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from clusters.rabbitmq import BrokerConfig
from harness.spec import SpecError, TestSpec
from nemesis import NemesisOptions
from workloads.queues import QueueSpec


@dataclass(frozen=True)
class Scenario:
    """A spec and what the documentation says should happen to it."""

    spec: TestSpec
    expect: str


def _s(name: str, description: str, expect: str, **changes: object) -> tuple[str, Scenario]:
    spec = dataclasses.replace(TestSpec(name=name, description=description), **changes)
    return name, Scenario(spec, expect)


SCENARIOS: dict[str, Scenario] = dict([
    _s("partition",
       "quorum queue, pause_minority, random-halves partitions",
       "no loss, no unexpected: quorum queues confirm only after a majority has the message",
       nemesis=NemesisOptions(faults=("partition-random-halves", "partition-one"),
                              interval_s=10, duration_s=20, targets="random")),
    _s("healthy",
       "quorum queue, no faults: the control run",
       "valid: nothing lost, nothing duplicated",
       nemesis=NemesisOptions(faults=())),
    _s("kill",
       "quorum queue, kill -9 of a random node's broker and restart",
       "no loss: confirmed messages are on a majority's disk",
       nemesis=NemesisOptions(faults=("kill",), interval_s=10, duration_s=15, targets="random")),
    _s("pause",
       "quorum queue, SIGSTOP/SIGCONT of a random node's broker",
       "no loss; a resumed node may need recovery (recorded as recover-node)",
       nemesis=NemesisOptions(faults=("pause",), interval_s=10, duration_s=20, targets="random")),
    _s("mirrored-partition",
       "classic mirrored queue (ha-mode all, automatic sync), autoheal, partitions",
       "loss possible: autoheal discards the losing side's writes, mirrored queues included",
       broker=BrokerConfig(partition_handling="autoheal"),
       queue=QueueSpec(type="mirrored", ha_mode="all", ha_sync_mode="automatic"),
       nemesis=NemesisOptions(faults=("partition-random-halves",), interval_s=10, duration_s=20,
                              targets="random")),
])


def scenario(name: str) -> TestSpec:
    """Returns the spec of a named scenario. Raises SpecError listing the known names."""
    try:
        return SCENARIOS[name].spec
    except KeyError:
        raise SpecError(
            f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}"
        ) from None
