"""One streaming pass over a history: what the plots and the report need, in bounded memory.

`scan_history` reads `history.jsonl` once, line by line, and keeps only
summaries: completion counts per (f, type) and time bucket, a seeded
reservoir sample of client latencies per (f, type), the nemesis fault
windows and heals, the harness phases, queue depth samples (`depth` ops),
queue placement changes (`placement` ops) and a capped list of other
harness events (recovery actions). Memory is O(buckets + sample size + open
ops), so a 10M-op history scans like a small one. In a run whose publishers
gave messages priorities (the harness's `priorities` observation), it also
samples each message's wait from its confirm to its first delivery, by the
priority it was published with (`priority_wait`; at most MAX_WAITING confirmed
messages awaiting their first delivery are followed at a time, those past it
counted in `priority_untracked`). What became of each
message is not the scan's to judge: it carries the checker's fates (the
`fates` section of results.json, `CheckedFates`), which the fates
plot draws, and the sections whose stored series the promise plots draw
(`checked`: delayed_retry, consumer_timeout, metadata).

Fault windows follow the one declaration of fault kinds (history.faults): a
window opens at the completion (info/ok) of a start f and closes at the
completion of its kind's stop f (a "start" ends both kills and stops, of the
node it names), or of "heal", which ends every open window. `fault_windows` is
the pure form.
"""

from __future__ import annotations

import json
import logging
import random
from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from history import HARNESS, NEMESIS, PRIORITIES, Op
from history.faults import FaultWindow, WindowTracker, fault_windows

log = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
DEFAULT_BUCKET_NS = NS_PER_S
DEFAULT_MAX_POINTS = 200_000
DEFAULT_MAX_EVENTS = 1_000
# Depth and placement series longer than this are thinned (every other sample dropped).
MAX_SERIES = 20_000
# At most this many node names are remembered (a cluster has a handful).
MAX_NODES = 64
# Log-scale axes cannot show a zero latency; clamp to 1 µs.
MIN_LATENCY_MS = 1e-3
# Confirmed messages followed at once until their first delivery (priority runs), and the
# points kept per priority.
MAX_WAITING = 200_000
PRIORITY_POINTS = 20_000
# results.json's sections a scan carries for the promise plots (their stored series).
CHECKED_SERIES = ("delayed_retry", "consumer_timeout", "metadata")
# How a message published without a priority is labelled.
NO_PRIORITY = "none"

DEPTH_F = "depth"
PLACEMENT_F = "placement"
PHASE_F = "phase"


@dataclass(frozen=True)
class PhaseSpan:
    """A harness phase ("main", "heal", "recovery", "drain", "teardown") and when it ran."""

    phase: str
    start_ns: int
    end_ns: int
    ended: bool = True


@dataclass(frozen=True)
class DepthSample:
    """A sampled queue depth: the largest ready and unacked counts any node reported (None when
    no node answered), each node's ready count, and the nodes that answered with an error."""

    time_ns: int
    ready: int | None
    unacked: int | None
    node_ready: tuple[tuple[str, int], ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlacementSample:
    """Where the queue lived from `time_ns` on: its leader or master and its other replicas."""

    time_ns: int
    leader: str | None
    members: tuple[str, ...] = ()
    mirrors: tuple[str, ...] = ()
    synchronised: tuple[str, ...] = ()

    @property
    def replicas(self) -> tuple[str, ...]:
        """Returns the nodes holding a replica other than the leader (members or mirrors)."""
        return tuple(n for n in dict.fromkeys(self.members + self.mirrors) if n != self.leader)


class Reservoir:
    """A uniform sample of at most `capacity` (x, y) points (Algorithm R), in compact arrays."""

    def __init__(self, capacity: int, rng: random.Random) -> None:
        self.capacity = capacity
        self.seen = 0
        self.xs = array("d")
        self.ys = array("d")
        self._rng = rng

    def add(self, x: float, y: float) -> None:
        """Takes one point; keeps it with probability capacity/seen."""
        n = self.seen
        self.seen = n + 1
        if n < self.capacity:
            self.xs.append(x)
            self.ys.append(y)
            return
        j = int(self._rng.random() * (n + 1))
        if j < self.capacity:
            self.xs[j] = x
            self.ys[j] = y


T = TypeVar("T")


class Thinned(Generic[T]):
    """A time series kept under `capacity` items by dropping every other one when full,
    then keeping only every 2nd, 4th, ... new item: evenly spread, bounded."""

    def __init__(self, capacity: int = MAX_SERIES) -> None:
        self.capacity = max(2, capacity)
        self.items: list[T] = []
        self.seen = 0
        self._stride = 1

    def add(self, item: T) -> None:
        """Takes one item, in time order."""
        self.seen += 1
        if (self.seen - 1) % self._stride:
            return
        self.items.append(item)
        if len(self.items) >= self.capacity:
            self.items = self.items[::2]
            self._stride *= 2


Key = tuple[str, str]


@dataclass(frozen=True)
class CheckedFates:
    """What became of the messages, as the checker judged them (results.json's fates,
    checkers.fates): per fate, its total and its counts per bucket of publish time."""

    bucket_s: float
    drained: bool
    totals: dict[str, int]
    series: dict[str, list[tuple[float, int]]]

    @staticmethod
    def from_results(results: Mapping[str, Any] | None) -> CheckedFates | None:
        """Takes results.json's content. Returns its fates, or None when it has none (no
        results, or results checked before the checker counted fates)."""
        fates = (results or {}).get("fates")
        if not isinstance(fates, dict) or not isinstance(fates.get("series"), dict):
            return None
        try:
            series = {str(f): [(float(t) / 1000, int(n)) for t, n in pts]
                      for f, pts in fates["series"].items()}
            return CheckedFates(float(fates.get("bucket_ms") or 0) / 1000,
                                bool(fates.get("drained")),
                                {str(f): int(n) for f, n in (fates.get("totals") or {}).items()},
                                series)
        except (TypeError, ValueError):
            log.warning("results.json's fates are malformed; none plotted")
            return None


def sibling_results(history: Path) -> dict[str, Any] | None:
    """Takes a history path. Returns the results.json beside it (the run's), or None when
    there is none or it cannot be read."""
    path = Path(history).with_name("results.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class HistoryScan:
    """What one pass over a history leaves: bounded summaries for plots and the report."""

    bucket_ns: int = DEFAULT_BUCKET_NS
    op_count: int = 0
    bad_lines: int = 0
    end_ns: int = 0
    # (f, type) -> count, for client ops, invocations included.
    client_counts: Counter[Key] = field(default_factory=Counter)
    # (f, type) of completions -> bucket -> count.
    rate: dict[Key, Counter[int]] = field(default_factory=dict)
    # (f, completion type) -> sample of (time s, latency ms).
    latency: dict[Key, Reservoir] = field(default_factory=dict)
    # Client invocations with no completion by the end of the history.
    unfinished: int = 0
    windows: list[FaultWindow] = field(default_factory=list)
    heals: list[FaultWindow] = field(default_factory=list)
    nemesis_failures: list[Op] = field(default_factory=list)
    phases: list[PhaseSpan] = field(default_factory=list)
    depth: list[DepthSample] = field(default_factory=list)
    depth_seen: int = 0
    placements: list[PlacementSample] = field(default_factory=list)
    # Every node an op named (its "node" field): the cluster, as far as the history shows it.
    nodes: set[str] = field(default_factory=set)
    # Harness events other than phases, depth and placement (recovery actions, ...).
    events: list[Op] = field(default_factory=list)
    events_dropped: int = 0
    # What became of the messages, as the checker judged them (None: no checked fates).
    fates: CheckedFates | None = None
    # The checker's sections whose stored series the promise plots draw (reports.plots_promises:
    # delayed_retry, consumer_timeout, metadata), as results.json has them; absent ones left out.
    checked: dict[str, Any] = field(default_factory=dict)
    # Priority runs: by priority published ("none" without), a sample of (confirm time s, ms
    # from the confirm to the first delivery); and the confirmed messages not followed.
    priority_wait: dict[str, Reservoir] = field(default_factory=dict)
    priority_untracked: int = 0
    priorities_observed: bool = False

    @property
    def latency_seen(self) -> int:
        """Returns how many latency points there were (before sampling)."""
        return sum(r.seen for r in self.latency.values())

    @property
    def latency_kept(self) -> int:
        """Returns how many latency points the samples hold."""
        return sum(len(r.xs) for r in self.latency.values())

    def phase(self, name: str) -> PhaseSpan | None:
        """Returns the first span of the named phase, or None."""
        return next((p for p in self.phases if p.phase == name), None)


def _is_client(process: Any) -> bool:
    return type(process) is int


def depth_sample(op: Op) -> DepthSample | None:
    """Takes a harness `depth` op. Returns its sample, or None when its value is malformed."""
    v = op.value
    if not isinstance(v, dict):
        return None
    per_node: dict[str, Any] = v["nodes"] if isinstance(v.get("nodes"), dict) else {}
    node_ready: list[tuple[str, int]] = []
    errors: list[str] = []
    for node, d in sorted(per_node.items()):
        if isinstance(d, dict) and _is_count(d.get("ready")):
            node_ready.append((str(node), int(d["ready"])))
        else:
            errors.append(str(node))
    ready, unacked = v.get("ready"), v.get("unacked")
    return DepthSample(
        op.time,
        int(ready) if ready is not None and _is_count(ready) else None,
        int(unacked) if unacked is not None and _is_count(unacked) else None,
        tuple(node_ready),
        tuple(errors),
    )


def placement_sample(op: Op) -> PlacementSample | None:
    """Takes a harness `placement` op. Returns its sample, or None when its value is malformed."""
    v = op.value
    if not isinstance(v, dict):
        return None

    def nodes(key: str) -> tuple[str, ...]:
        x = v.get(key)
        return tuple(str(n) for n in x) if isinstance(x, list) else ()

    leader = v.get("leader")
    return PlacementSample(
        op.time,
        str(leader) if leader else None,
        nodes("members"),
        nodes("mirrors"),
        nodes("synchronised_mirrors"),
    )


def _is_count(x: Any) -> bool:
    return type(x) is int or (type(x) is float and x.is_integer())


def scan_history(
    path: Path,
    *,
    bucket_ns: int = DEFAULT_BUCKET_NS,
    max_points: int = DEFAULT_MAX_POINTS,
    seed: int = 0,
    max_events: int = DEFAULT_MAX_EVENTS,
    results: Mapping[str, Any] | None = None,
) -> HistoryScan:
    """Takes a history path, the rate bucket width, the latency sample size per
    (f, type), the sampling seed, how many harness events to keep, and the run's
    results (default: the results.json beside the history), whose fates and promise
    sections it carries.

    Returns a HistoryScan. Lines that are not JSON objects with an integer time
    (e.g. the torn last line of a killed run) are counted in `bad_lines`, not raised.
    A client invocation still open at the end counts as an info op ending there.
    """
    if bucket_ns <= 0 or max_points <= 0:
        raise ValueError("bucket_ns and max_points must be positive")
    scan = HistoryScan(bucket_ns=bucket_ns)
    found = results if results is not None else sibling_results(path)
    scan.fates = CheckedFates.from_results(found)
    scan.checked = {k: v for k, v in (found or {}).items()
                    if k in CHECKED_SERIES and isinstance(v, dict)}
    scanner = _Scanner(scan, max_points, random.Random(seed), max_events)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            scanner.line(line)
    scanner.finish()
    log.debug("scanned %s: %d ops, %d bad lines", path, scan.op_count, scan.bad_lines)
    return scan


class _Scanner:
    """One pass of `scan_history` under way: the scan it fills, and what it holds open
    (client invocations, fault windows, phases) and thins (depth, placement) meanwhile."""

    def __init__(self, scan: HistoryScan, max_points: int, rng: random.Random,
                 max_events: int) -> None:
        self.scan = scan
        self.max_points = max_points
        self.rng = rng
        self.max_events = max_events
        self.tracker = WindowTracker()
        # Open client invocations by (process, value): a pipelining publisher has several.
        self.pending: dict[tuple[Any, Any], tuple[str, int]] = {}
        self.open_phases: dict[str, int] = {}
        self.depth: Thinned[DepthSample] = Thinned()
        self.placements: Thinned[PlacementSample] = Thinned()
        self.end = 0
        # Priority runs (from the `priorities` observation on): the priorities of messages
        # published and not completed, those of them delivered already, and the confirmed
        # ones awaiting their first delivery (confirm time, priority label).
        self.priorities = False
        self.unconfirmed: dict[Any, Any] = {}
        self.early: set[Any] = set()
        self.waiting: dict[Any, tuple[int, str]] = {}

    def line(self, line: str) -> None:
        """Takes one line of the history. Counts it as an op or a bad line and feeds the op
        to the summary its process keeps."""
        scan = self.scan
        try:
            d = json.loads(line)
        except ValueError:
            if line.strip():
                scan.bad_lines += 1
            return
        t = d.get("time") if isinstance(d, dict) else None
        if type(t) is not int:
            scan.bad_lines += 1
            return
        scan.op_count += 1
        self.end = max(self.end, t)
        process = d.get("process")
        node = d.get("node")
        if isinstance(node, str) and node not in scan.nodes and len(scan.nodes) < MAX_NODES:
            scan.nodes.add(node)
        if _is_client(process):
            self._client(d, process, t)
            if self.priorities:
                self._wait(d, t)
        elif process == NEMESIS:
            self.tracker.feed(Op.from_dict(d))
        elif process == HARNESS:
            self.priorities = self.priorities or d.get("f") == PRIORITIES
            _harness_op(Op.from_dict(d), scan, self.open_phases, self.depth, self.placements,
                        self.max_events)

    def _client(self, d: dict[str, Any], process: Any, t: int) -> None:
        """Takes a client op (decoded), its process and time. Counts it; an invocation waits
        for its completion, a completion counts in its rate bucket and, when it completes a
        waiting invocation of the same f, gives a latency point."""
        scan = self.scan
        typ: Any = d.get("type")
        f = str(d.get("f"))
        scan.client_counts[(f, typ)] += 1
        value = d.get("value")
        if typ == "invoke":
            self.pending[(process, value)] = (f, t)
            return
        series = scan.rate.get((f, typ))
        if series is None:
            series = scan.rate[(f, typ)] = Counter()
        series[t // scan.bucket_ns] += 1
        inv = self.pending.get((process, value))
        if inv is not None and inv[0] == f:
            del self.pending[(process, value)]
            self._point((f, typ), t if typ == "info" else inv[1], t - inv[1])

    def _wait(self, d: dict[str, Any], t: int) -> None:
        """Takes a client op (decoded) of a priority run and its time. Follows each message from
        its confirm to its first delivery, which gives a point of its priority's sample; a
        message delivered before its confirm came is not followed."""
        f, typ, value = d.get("f"), d.get("type"), d.get("value")
        if f == "publish":
            if typ == "invoke":
                self.unconfirmed[value] = d.get("priority")
                return
            priority = self.unconfirmed.pop(value, d.get("priority"))
            if typ != "ok" or value in self.early:
                self.early.discard(value)
            elif len(self.waiting) < MAX_WAITING:
                self.waiting[value] = (t, NO_PRIORITY if priority is None else str(priority))
            else:
                self.scan.priority_untracked += 1
        elif f in ("consume", "drain") and typ == "ok":
            confirmed = self.waiting.pop(value, None)
            if confirmed is not None:
                res = self.scan.priority_wait.get(confirmed[1])
                if res is None:
                    res = self.scan.priority_wait[confirmed[1]] = Reservoir(
                        min(self.max_points, PRIORITY_POINTS), self.rng)
                res.add(confirmed[0] / NS_PER_S,
                        max((t - confirmed[0]) / NS_PER_MS, MIN_LATENCY_MS))
            elif value in self.unconfirmed:
                self.early.add(value)

    def _point(self, key: Key, x_ns: int, latency_ns: int) -> None:
        """Takes a (f, type), a time and a latency. Adds the point to that key's sample."""
        res = self.scan.latency.get(key)
        if res is None:
            res = self.scan.latency[key] = Reservoir(self.max_points, self.rng)
        res.add(x_ns / NS_PER_S, max(latency_ns / NS_PER_MS, MIN_LATENCY_MS))

    def finish(self) -> None:
        """Ends the pass: invocations still open count as info ops ending at the history's
        end, where open fault windows and phases end too; the scan takes what was kept."""
        scan, end = self.scan, self.end
        for f, start in self.pending.values():
            self._point((f, "info"), end, end - start)
        scan.unfinished = len(self.pending)
        scan.end_ns = end
        scan.windows = self.tracker.finish(end)
        scan.heals = self.tracker.heals
        scan.nemesis_failures = self.tracker.failures
        scan.phases.extend(PhaseSpan(p, s, max(s, end), ended=False)
                           for p, s in self.open_phases.items())
        scan.phases.sort(key=lambda p: (p.start_ns, p.end_ns))
        scan.depth, scan.depth_seen = self.depth.items, self.depth.seen
        scan.placements = self.placements.items
        scan.priorities_observed = self.priorities


def _harness_op(
    op: Op,
    scan: HistoryScan,
    open_phases: dict[str, int],
    depth: Thinned[DepthSample],
    placements: Thinned[PlacementSample],
    max_events: int,
) -> None:
    if op.f == DEPTH_F:
        sample = depth_sample(op)
        if sample is not None:
            depth.add(sample)
        return
    if op.f == PLACEMENT_F:
        placement = placement_sample(op)
        if placement is not None:
            placements.add(placement)
        return
    if op.f == PHASE_F:
        _track_phase(op, open_phases, scan.phases)
    if len(scan.events) < max_events:
        scan.events.append(op)
    else:
        scan.events_dropped += 1


def _track_phase(op: Op, open_phases: dict[str, int], spans: list[PhaseSpan]) -> None:
    if not isinstance(op.value, dict):
        return
    phase, state = str(op.value.get("phase")), op.value.get("state")
    if state == "start":
        open_phases[phase] = op.time
    elif state in ("end", "incomplete"):
        start = open_phases.pop(phase, op.time)
        spans.append(PhaseSpan(phase, start, max(op.time, start)))


__all__ = [
    "DEFAULT_MAX_POINTS",
    "NO_PRIORITY",
    "NS_PER_MS",
    "NS_PER_S",
    "CheckedFates",
    "DepthSample",
    "FaultWindow",
    "HistoryScan",
    "PhaseSpan",
    "PlacementSample",
    "Reservoir",
    "Thinned",
    "WindowTracker",
    "depth_sample",
    "fault_windows",
    "placement_sample",
    "scan_history",
]
