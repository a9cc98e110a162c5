"""The bridge from a test spec to the nemesis: one NemesisRunner per run."""

from __future__ import annotations

import threading

from clusters.base import Broker, Cluster
from harness.spec import TestSpec
from history import HistoryWriter
from nemesis import NemesisRunner


def make_nemesis(
    spec: TestSpec, cluster: Cluster, broker: Broker, history: HistoryWriter,
    stop: threading.Event,
) -> NemesisRunner:
    """Takes the spec, the provisioned cluster and broker, the history and the run's stop event.

    Returns a NemesisRunner, already set up (chains created, netem probed when a
    netem fault was asked for), seeded from the spec so a run can be repeated.
    Raises FaultUnsupported before the main phase when a fault cannot run here.
    """
    assert spec.seed is not None
    runner = NemesisRunner(cluster, broker, history, spec.nemesis, spec.seed, spec.queue.name, stop)
    runner.setup()
    return runner
