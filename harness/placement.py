"""Sampling, during the run, where the queue lives: its leader or master and its members or mirrors.

A failover shows up in the history as a `placement` harness event whose value
differs from the previous one, so anomalies can be tied to leader changes.
Samples are recorded only when the placement changes (and once at start).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from harness.history import HARNESS, HistoryWriter, Op

log = logging.getLogger(__name__)


class PlacementSource(Protocol):
    """Anything that can say where a queue lives (RabbitBroker does)."""

    def queue_placement(self, queue: str) -> dict[str, Any]:
        """Returns the placement dict, {} when unknown."""
        ...


class PlacementSampler:
    """A thread that records the queue's placement every `interval_s` while the run lasts."""

    def __init__(
        self, source: PlacementSource, queue: str, history: HistoryWriter, interval_s: float,
        stop: threading.Event,
    ) -> None:
        self.source = source
        self.queue = queue
        self.history = history
        self.interval_s = interval_s
        self.stop = stop
        self.samples = 0
        self.changes = 0
        self._last: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._loop, name="placement", daemon=True)

    def start(self) -> None:
        """Starts sampling (no-op when the interval is 0)."""
        if self.interval_s > 0:
            self._thread.start()

    def join(self, timeout: float = 30.0) -> None:
        """Waits for the sampler to end after `stop` was set."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    def sample(self) -> None:
        """Takes one sample; records it when it differs from the last known placement."""
        try:
            placement = self.source.queue_placement(self.queue)
        except Exception as e:  # a sampler must never end the run
            log.debug("placement sample failed: %s", e)
            return
        self.samples += 1
        if not placement or placement == self._last:
            return
        self.changes += 1
        self._last = placement
        self.history.append(Op(type="info", process=HARNESS, f="placement",
                               value={"queue": self.queue, **placement},
                               node=placement.get("leader")))

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval_s)
