"""Sampling, during the run, where the queue lives and how many messages it holds, node by node.

Every `interval_s` the sampler asks every node at once (one `list_queues` each,
with a hard timeout) and records:

- a `depth` harness event every time: value {"queue", "nodes": {node: {"ready",
  "unacked"[, "unlisted"]} or {"error"} or {"absent": true}}, "ready", "unacked"} where the
  top-level counts are the largest any node reported (during a split brain two
  masters may each hold a different queue), so a reader sees how much was at
  risk when each fault began;
- a `placement` harness event when the queue's leader or members change (and
  once at the start), as most nodes that name a leader see it (a node cut off
  still names the leader it last knew; a tie goes to the first node's), so
  anomalies can be tied to leader changes.

A quorum queue's counts in `list_queues` are metrics the leader emits every
few seconds: good enough for a plot, never a proof of emptiness (the drain
asks the leader itself). And `list_queues` leaves out, silently, a queue whose
process does not answer (a mirrored queue's master hung after autoheal), so a
node that does not list the queue is asked again through the queue kind's own
depth source (the drain's: its record, then its process, failing loudly):
"absent" only when the record is gone, an error when the queue does not answer,
and the counts (marked "unlisted") when it does.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from clusters.base import Node
from clusters.rabbitmq_admin import QueueDepth
from clusters.remote import RemoteError
from history import HARNESS, HistoryWriter, Op

log = logging.getLogger(__name__)

PLACEMENT_KEYS = ("type", "leader", "members", "mirrors", "synchronised_mirrors")


class StatsSource(Protocol):
    """Anything that can say, node by node, where a queue lives and its depth (RabbitAdmin)."""

    def queue_stats(self, node: Node, queue: str, timeout: float = 10.0) -> dict[str, Any] | None:
        """Returns the queue's placement and counts as that node sees them, None when it lists
        no such queue; raises when the node does not answer."""
        ...


def _reason(e: Exception) -> str:
    """Returns why a node did not answer, short: a failed CLI call's exit code and the start of
    its output (the broker's own error line), without the command line or the usage text."""
    text = str(e)
    if isinstance(e, RemoteError):
        for verb in (" exited ", " timed out "):
            if verb in text:
                text = text[text.index(verb) + 1:]
                break
    text = text.split("\x1b[1mUsage", 1)[0].split("\nUsage", 1)[0]
    return f"{type(e).__name__}: {' '.join(text.split())}"[:300]


def agreed_placement(answers: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Takes every node's answer, in node order. Returns the placement most nodes that name a
    leader agree on (a tie: the first node's among them), None when none names one. A node cut
    off in a partition still names the leader it last knew; the majority side names the one
    it elected, and that is the queue's leader."""
    views = [{k: a.get(k) for k in PLACEMENT_KEYS} for a in answers if a.get("leader")]
    if not views:
        return None
    leaders = Counter(v["leader"] for v in views)
    top = max(leaders.values())
    leader = next(v["leader"] for v in views if leaders[v["leader"]] == top)
    return next(v for v in views if v["leader"] == leader)


class QueueSampler:
    """A thread that records the queue's depth (and placement changes) every `interval_s`."""

    def __init__(
        self, source: StatsSource, nodes: Sequence[Node], queue: str, history: HistoryWriter,
        interval_s: float, stop: threading.Event, timeout_s: float = 5.0,
        depth: Callable[[Node], QueueDepth] | None = None,
    ) -> None:
        self.source = source
        # The loud source, asked where a node does not list the queue (None: take "absent").
        self.depth = depth
        self.nodes = tuple(nodes)
        self.queue = queue
        self.history = history
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.stop = stop
        self.samples = 0
        self.changes = 0
        self._last: dict[str, Any] | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.nodes)),
                                        thread_name_prefix="sampler")
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def start(self) -> None:
        """Starts sampling (no-op when the interval is 0)."""
        if self.interval_s > 0:
            self._thread.start()

    def join(self, timeout: float = 30.0) -> None:
        """Waits for the sampler to end after `stop` was set."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _ask(self, node: Node) -> dict[str, Any]:
        try:
            row = self.source.queue_stats(node, self.queue, self.timeout_s)
        except Exception as e:  # a sampler must never end the run
            return {"error": _reason(e)}
        if row is not None:
            return row
        if self.depth is None:
            return {"absent": True}
        try:
            d = self.depth(node)
        except Exception as e:
            return {"error": f"not listed by list_queues, and asked itself: {_reason(e)}"[:300]}
        if not d.exists:
            return {"absent": True}
        return {"ready": d.ready, "unacked": d.unacked, "unlisted": True}

    def sample(self) -> None:
        """Takes one sample from every node; records the depth, and the placement if it changed."""
        answers = dict(zip((n.name for n in self.nodes),
                           self._pool.map(self._ask, self.nodes), strict=True))
        self.samples += 1
        by_node: dict[str, dict[str, Any]] = {}
        for name, a in answers.items():
            if "error" in a or "absent" in a:
                by_node[name] = a
            else:
                by_node[name] = {"ready": a.get("ready"), "unacked": a.get("unacked"),
                                 **({"unlisted": True} if a.get("unlisted") else {})}
        ready = [d["ready"] for d in by_node.values() if isinstance(d.get("ready"), int)]
        unacked = [d["unacked"] for d in by_node.values() if isinstance(d.get("unacked"), int)]
        self.history.append(Op(type="info", process=HARNESS, f="depth", value={
            "queue": self.queue, "nodes": by_node,
            "ready": max(ready) if ready else None, "unacked": max(unacked) if unacked else None,
        }))
        placement = agreed_placement(list(answers.values()))
        if placement is None or placement == self._last:
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
