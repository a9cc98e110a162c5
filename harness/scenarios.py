"""Named scenarios: complete test specs, each with the outcome RabbitMQ's documentation leads us to expect.

`scenario(name)` returns the spec; the CLI's `--scenario NAME` starts from it
and further options override it; `make test-<name>` runs one. `expect_valid`
is True where the documentation promises safety (a loss there is a finding),
None where loss is documented as possible (the run measures how much).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from clusters.rabbitmq import BrokerConfig
from harness.spec import CheckSpec, SpecError, TestSpec
from nemesis import NemesisOptions
from workloads.clients import ClientOptions
from workloads.queue import WorkloadOptions
from workloads.queues import QueueSpec


@dataclass(frozen=True)
class Scenario:
    """A spec and what the documentation says should happen to it."""

    spec: TestSpec
    expect: str
    expect_valid: bool | None = True


def _faults(*faults: str, interval: float = 10, duration: float = 20, targets: str = "one",
            **extra: object) -> NemesisOptions:
    return NemesisOptions(faults=faults, interval_s=interval, duration_s=duration,
                          targets=targets, **extra)  # type: ignore[arg-type]


MIRRORED_ALL = QueueSpec(type="mirrored", ha_mode="all", ha_sync_mode="automatic")
CLASSIC = QueueSpec(type="classic")

_CATALOGUE: list[tuple[str, str, str, bool | None, dict[str, object]]] = [
    ("partition", "quorum queue, pause_minority, random-halves and single-node partitions",
     "no loss: quorum queues confirm only once a majority has the message", True,
     {"time_limit_s": 90.0,  # three 20 s faults: about a minute of partitions
      "nemesis": _faults("partition-random-halves", "partition-one")}),
    ("healthy", "quorum queue, no faults: the control run",
     "valid: nothing lost, duplicated or reordered", True,
     {"nemesis": NemesisOptions(faults=())}),
    ("kill", "quorum queue, kill -9 of a random node's broker, then restart",
     "no loss: a confirmed message is on a majority's disk", True,
     {"nemesis": _faults("kill", duration=15)}),
    ("pause", "quorum queue, SIGSTOP then SIGCONT of a random node's broker",
     "no loss; a resumed node may need recovery (recorded as recover-node)", True,
     {"nemesis": _faults("pause")}),
    ("quorum-leader-partition", "quorum queue, pause_minority, the queue leader's node isolated",
     "no loss: a new leader is elected by the majority; the old one steps down", True,
     {"nemesis": _faults("partition-leader")}),
    ("quorum-ignore", "quorum queue under cluster_partition_handling=ignore, partitions",
     "no loss: Raft does not rely on partition handling; the harness mends the split cluster",
     True,
     {"broker": BrokerConfig(partition_handling="ignore"),
      "nemesis": _faults("partition-random-halves")}),
    ("quorum-majorities-ring", "quorum queue, 5 nodes, majorities-ring and bridge partitions",
     "no loss: every node sees a majority, but no majority is the same", True,
     {"nodes": 5, "nemesis": _faults("partition-majorities-ring", "partition-bridge")}),
    ("quorum-rolling-restart", "quorum queue, rolling restart of every node",
     "no loss; clients reconnect to the other nodes", True,
     {"nemesis": _faults("rolling-restart", duration=5)}),
    ("quorum-packet-loss", "quorum queue, 20% packet loss on a random node's cluster traffic",
     "no loss; latency rises, publishes may time out (info)", True,
     {"nemesis": _faults("packet-loss", packet_loss=0.2)}),
    ("quorum-sac-fifo", "quorum queue, single active consumer, prefetch 1, strict FIFO check",
     "strict FIFO, redeliveries included: one consumer at a time, one message in flight", True,
     {"queue": QueueSpec(single_active_consumer=True),
      "workload": WorkloadOptions(publishers=1, consumers=2, rate=50,
                                  client=ClientOptions(prefetch=1)),
      "check": CheckSpec(strict_order=True),
      "nemesis": _faults("kill", duration=15)}),
    ("quorum-crashing-consumers", "quorum queue, consumers crash unacked every 50 deliveries",
     "no loss; duplicates are redelivered (flagged), which at-least-once allows", True,
     {"workload": WorkloadOptions(client=ClientOptions(crash_after=50)),
      "nemesis": _faults("partition-one")}),
    ("stream-partition", "stream (3 replicas), pause_minority, random-halves and single-node "
     "partitions; every consumer reads the log from its first offset",
     "no loss and per-publisher order for every reader: a stream confirms once a majority of "
     "replicas has the message; each consumer sees every message, so repeats are by design", True,
     {"queue": QueueSpec(type="stream"),
      "nemesis": _faults("partition-random-halves", "partition-one")}),
    ("mirrored-partition", "mirrored queue (ha-mode all, automatic sync), autoheal, partitions",
     "loss possible: autoheal restarts the losing side and discards what it accepted", None,
     {"broker": BrokerConfig(partition_handling="autoheal"), "queue": MIRRORED_ALL,
      "nemesis": _faults("partition-random-halves")}),
    ("mirrored-master-partition",
     "mirrored queue (ha-mode all), autoheal, the master's node isolated",
     "loss possible: the isolated master keeps confirming until the partition is detected", None,
     {"broker": BrokerConfig(partition_handling="autoheal"), "queue": MIRRORED_ALL,
      "nemesis": _faults("partition-leader")}),
    ("mirrored-pause-minority", "mirrored queue (ha-mode all), pause_minority, partitions",
     "loss possible (Jepsen found it in 2014); pause_minority narrows the window", None,
     {"queue": MIRRORED_ALL, "nemesis": _faults("partition-random-halves", "partition-one")}),
    ("mirrored-unsynced-promotion",
     "mirrored queue (exactly 2, manual sync, promote on failure always), master killed",
     "loss possible: a restarted mirror comes back empty and unsynchronised, and "
     "ha-promote-on-failure=always promotes it when the master dies", None,
     {"queue": QueueSpec(type="mirrored", ha_mode="exactly", ha_params=2, ha_sync_mode="manual",
                         ha_promote_on_failure="always", ha_promote_on_shutdown="always"),
      "nemesis": _faults("kill", targets="leader", interval=8, duration=12)}),
    ("durable-full-restart", "durable classic queue, persistent messages, full-cluster restart",
     "nothing lost: durable queues and persistent messages survive a restart", True,
     {"queue": CLASSIC, "nemesis": _faults("full-restart", interval=15, duration=10)}),
    ("transient-full-restart", "durable classic queue, transient messages, full-cluster restart",
     "transient messages still queued at the restart are gone: loss expected", None,
     {"queue": CLASSIC,
      "workload": WorkloadOptions(consumers=0, client=ClientOptions(persistent=False)),
      "nemesis": _faults("full-restart", interval=15, duration=10)}),
]

SCENARIOS: dict[str, Scenario] = {
    name: Scenario(
        dataclasses.replace(
            TestSpec(name=name, description=desc), **changes,  # type: ignore[arg-type]
        ).for_queue(),
        expect, expect_valid,
    )
    for name, desc, expect, expect_valid, changes in _CATALOGUE
}


def scenario(name: str) -> TestSpec:
    """Returns the spec of a named scenario. Raises SpecError listing the known names."""
    try:
        return SCENARIOS[name].spec
    except KeyError:
        raise SpecError(
            f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}"
        ) from None
