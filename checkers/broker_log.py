"""What the brokers' own logs say happened: failure detections and their effects, as events.

RabbitMQ notices a fault through two detectors of its own. The Erlang
distribution's declares a silent peer down after 0.75-1.25 x net_ticktime
(`node 'rabbit@b' down: net_tick_timeout`), at once when the peer's TCP
connection closes (a killed or stopped node: `connection_closed`), and drives
partition handling from there (`running_partitioned_network`, "Partial
partition detected", pause_minority's "minority/secondary status", autoheal).
A quorum queue's Raft members notice a lost leader on their own, sometimes
before and sometimes without the first (a follower granting its vote in a new
term, a candidate becoming leader). What follows from a detection (a pause, an
autoheal restart, a mirror promoted, a node booting again) is an effect.
Two more kinds of line say RabbitMQ took in a fault the harness made with its
own operations (nemesis.faults.operations): its resource monitors raising an
alarm (detector "alarm": the memory or disk alarm set, about the alarmed node),
and a node carrying out an operator's command (detector "operation": a drain
begun, a quorum member's server deleted); a leader handing its leadership over
is the Raft members' own. Their effects: a node drained, a member removed, a
leader handing over or leaving.

`read_events` turns every node's `rabbit*.log` into `LogEvent`s, each with its
time on the history's clock, the node that logged it, its kind, the detector
it belongs to (or None for an effect), the peer node it names, and the file
and line it came from. The patterns are RabbitMQ 3.10's own lines, captured
from real runs (tests/checkers/fixtures/broker_logs/; those of the operations
are written from RabbitMQ 3.10.8's and Ra 2.2's sources, not yet captured,
and tested on lines written as they print them); they are one table
(`PATTERNS_3_10`), chosen by the broker's release line (`patterns_for`), so another
release's lines go beside them (`PATTERNS`, keyed by the lines of clusters.releases) rather
than into `if`s. Pure file reading: no
Spark, no cluster.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

log = logging.getLogger(__name__)

Detector = Literal["distribution", "raft", "alarm", "operation", "recovery"]
NS: Final = 1_000_000_000

# A 3.10 log line: wall-clock time with its offset, level, Erlang pid, message. A multi-line
# message repeats the time on every line.
LINE: Final = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+[+-]\d\d:\d\d) \[(\w+)\] <[\d.]+> ?(.*)$")
# How an Erlang node names itself in a log line: rabbit@<host or address>.
NODE_NAME: Final = re.compile(r"rabbit@([\w.\-]+)")


@dataclass(frozen=True)
class Pattern:
    """One kind of log line: its kind, the detector it belongs to (None: an effect), and the
    regular expression; a group named `peer` is the node the line is about, `term` a Raft
    term, `queue` a queue name."""

    kind: str
    detector: Detector | None
    regex: re.Pattern[str]


def _p(kind: str, detector: Detector | None, rx: str) -> Pattern:
    return Pattern(kind, detector, re.compile(rx))


_QUEUE = r"queue '(?P<queue>[^']*)' in vhost '[^']*': "
PATTERNS_3_10: Final[tuple[Pattern, ...]] = (
    # The distribution's detector: a peer declared down (net_tick_timeout for a silent one,
    # connection_closed for one whose connection closed), Mnesia's view of a partition.
    _p("node-down", "distribution", r"^node '(?P<peer>rabbit@[\w.\-]+)' down: (?P<reason>\w+)"),
    _p("node-down", "distribution",
       r"^\*\* Node '(?P<peer>rabbit@[\w.\-]+)' not responding \*\*"),
    _p("partitioned-network", "distribution",
       r"running_partitioned_network, '(?P<peer>rabbit@[\w.\-]+)'"),
    _p("partial-partition", "distribution", r"^Partial partition detected"),
    _p("partial-partition", "distribution",
       r"^Received a 'DOWN' message from '(?P<peer>rabbit@[\w.\-]+)' but still can communicate"),
    # A quorum queue's members: the leader's monitor fired, a vote in a new term, a new leader.
    _p("leader-down", "raft", _QUEUE + r"Leader monitor down with (?P<reason>\w+)"),
    _p("election", "raft", _QUEUE + r"(?:pre_vote )?election called for in term (?P<term>\d+)"),
    _p("election", "raft", _QUEUE + r"granting vote for .* for term (?P<term>\d+)"),
    _p("election", "raft", _QUEUE + r"follower -> (?:pre_vote|candidate) in term: (?P<term>\d+)"),
    _p("leader-elected", "raft", _QUEUE + r"candidate -> leader in term: (?P<term>\d+)"),
    # Effects: what the detections led to.
    _p("pause-minority", None, r"^Cluster minority/secondary status detected - awaiting recovery"),
    _p("autoheal-decision", None, r"^Autoheal decision"),
    _p("autoheal-restart", None, r"^Autoheal: we were selected to restart"),
    _p("autoheal-winner", None, r"^Autoheal: I am the winner"),
    _p("promotion", None, r"Promoting (?:mirror|slave) (?P<pid>\S+) to (?:master|leader)"),
    _p("no-synchronised-mirror", None, r"Stopping all nodes on master shutdown since no "
       r"synchronised mirror"),
    _p("rabbit-down", None, r"^rabbit on node '(?P<peer>rabbit@[\w.\-]+)' down"),
    _p("node-start", None, r"^\s*Starting RabbitMQ [\d.]+ on Erlang"),
    _p("app-stop", None, r"^Stopping RabbitMQ applications and their dependencies"),
    _p("leader-abdicates", None, _QUEUE + r"leader saw .* abdicates term: (?P<term>\d+)"),
    # RabbitMQ's own operations (nemesis.faults.operations). Maintenance mode: the drained
    # node's own lines (rabbit_maintenance).
    _p("maintenance-drain", "operation",
       r"^This node is being put into maintenance \(drain\) mode"),
    _p("node-drained", None, r"^Node is ready to be shut down for maintenance or upgrade"),
    _p("maintenance-revive", None,
       r"^This node is being revived from maintenance \(drain\) mode"),
    # A quorum member removed: Ra deletes its server on the removed node; a leader removed
    # leaves first. A leader transferring its leadership waits for the new one to be elected.
    _p("member-deleted", "operation",
       r"^Deleting server '?(?P<server>[^' ]+)'? and its data directory"),
    _p("leader-removed", "raft", _QUEUE + r"leader not in new cluster - goodbye"),
    _p("leader-handover", "raft", _QUEUE + r"leader -> await_condition in term: (?P<term>\d+)"),
    # Resource alarms (rabbit_alarm on every node, about the alarmed one; the monitors on it).
    _p("alarm-set", "alarm", r"^(?P<resource>memory|disk) resource limit alarm set on node "
       r"'?(?P<peer>rabbit@[\w.\-]+)'?"),
    _p("alarm-set", "alarm", r"^vm_memory_high_watermark set\. Memory used:\d+ allowed:\d+"),
    _p("alarm-set", "alarm", r"^Free disk space is insufficient\. Free bytes: \d+\. Limit: \d+"),
    _p("alarm-cleared", None, r"^(?P<resource>memory|disk) resource limit alarm cleared on node "
       r"'?(?P<peer>rabbit@[\w.\-]+)'?"),
    # A disk corruption (nemesis.faults.disk): what a damaged member's Ra says, written from Ra's
    # sources (2.0 to 3.1, not yet captured): its WAL refused for a damaged record before the
    # last ("WAL:", from Ra 3.0 "WAL in <system>:"; a damaged last record is dropped in
    # silence), and a segment entry that fails its CRC or ends short, the member's exit reason.
    _p("wal-checksum-failed", None,
       r"WAL(?: in [^:]+)?: record failed CRC check during recovery"),
    _p("segment-checksum-failed", None,
       r"ra_log_segment_(?:crc_check_failure|unexpected_eof)"),
    # A node's own recovery at boot (detector "recovery"): its persistent message store found no
    # file summary, which rabbit_msg_store writes only as it stops cleanly and deletes as it
    # loads it, so the node had not stopped cleanly (a kill, a power loss) - or this is its
    # first boot, which comes before any fault. The one-line form only: the store's other
    # "rebuilding indices from scratch" (recovery terms that differ, as after an autoheal
    # restart) follows a message of its own on the line before. Written from rabbit_msg_store
    # (3.10.8, 4.0.5, 4.3.5: recover_index_and_client_refs) and captured from 4.3.6 runs. A
    # classic queue's index recovering after an unclean stop says what it dropped (v2 index:
    # rabbit_classic_queue_index_v2:recover), an effect.
    _p("unclean-restart", "recovery",
       r'^Message store "?[^":]+/msg_store_persistent"?: rebuilding indices from scratch$'),
    _p("queue-recovered-unclean", None,
       r"^Queue (?P<queue>.+) in vhost \S+ dropped \d+/\d+/\d+ persistent messages and \d+ "
       r"transient messages after unclean shutdown"),
)
# RabbitMQ 4.0 logs the same distribution, partition-handling and quorum-queue lines (same
# format; captured from real 4.0.5 runs), and its Raft metadata store (Khepri, and the
# metadata store's Ra cluster under Mnesia too) logs its own elections: a detection by that
# store's Raft members, and a new metadata leader as an effect (never a queue's failover).
_STORE = r"^RabbitMQ metadata store: "
PATTERNS_4_0: Final[tuple[Pattern, ...]] = (
    *PATTERNS_3_10,
    _p("election", "raft",
       _STORE + r"(?:follower|pre_vote) -> (?:pre_vote|candidate) in term: (?P<term>\d+)"),
    _p("metadata-leader", None, _STORE + r"candidate -> leader in term: (?P<term>\d+)"),
    _p("metadata-leader", None, _STORE + r"detected a new leader .* in term (?P<term>\d+)"),
    # 4.0 also says, on the node the CLI asked, which member it deleted.
    _p("member-deleted", "operation", r"^Deleted a replica of quorum queue '(?P<queue>[^']*)' in "
       r"vhost '[^']*' on node '?(?P<peer>rabbit@[\w.\-]+)'?"),
)
# RabbitMQ 4.3.6 (Khepri only, on Erlang 29; captured from real runs) logs 4.0's lines, and two
# more. Erlang 29's distribution says when it gives up on a silent peer, beside "not responding"
# (its earlier "net tick 1/4 missed" warnings are not a declaration and are not read), and a
# quorum queue's member waiting on a leader says it thinks that leader's node is down.
PATTERNS_4_3: Final[tuple[Pattern, ...]] = (
    *PATTERNS_4_0,
    _p("node-down", "distribution", r"^\*\* Node '(?P<peer>rabbit@[\w.\-]+)': \d+ consecutive "
       r"net ticks missed .*net_tick_timeout"),
    _p("leader-down", "raft", _QUEUE + r"await_condition - Leader node "
       r"'(?P<peer>rabbit@[\w.\-]+)' might be down"),
)
PATTERNS: Final[Mapping[str, tuple[Pattern, ...]]] = {
    "3.10": PATTERNS_3_10, "4.0": PATTERNS_4_0, "4.3": PATTERNS_4_3}


def patterns_for(line: str | None) -> tuple[Pattern, ...]:
    """Takes a release line ("4.0": the harness maps the version the nodes reported to it with
    clusters.releases.known_line, this package parsing no version), or None when the version is
    unknown (a run stored before versions were recorded: 3.10). Returns its log patterns.
    Raises ValueError for a line the table lacks (its keys are the release table's lines)."""
    if line is None:
        return PATTERNS_3_10
    try:
        return PATTERNS[line]
    except KeyError:
        raise ValueError(f"no broker log patterns for RabbitMQ {line}; known: "
                         f"{', '.join(PATTERNS)}") from None


@dataclass(frozen=True)
class LogEvent:
    """One log line that matters: when (ns on the history's clock), which node logged it, its
    kind and detector (None: an effect), the node it is about (`peer`, a node name of the run
    or None), its Raft `term`, its queue, where it came from (`evidence`: file:line) and its
    text."""

    time_ns: int
    node: str
    kind: str
    detector: Detector | None
    evidence: str
    text: str
    peer: str | None = None
    term: int | None = None
    queue: str | None = None

    @property
    def at_ms(self) -> float:
        """Returns the time in ms since the history started."""
        return round(self.time_ns / 1_000_000, 3)


@dataclass(frozen=True)
class LogCoverage:
    """The span (history ns) a node's logs cover: first and last timestamped line."""

    node: str
    first_ns: int
    last_ns: int


def node_names(nodes: Mapping[str, str]) -> dict[str, str]:
    """Takes test.json's nodes ({name: address}). Returns every way a log line may name a node
    (its address or its name, after "rabbit@") mapped to the node's name."""
    out = {name: name for name in nodes}
    out.update({str(addr): name for name, addr in nodes.items() if addr})
    return out


def parse_line(text: str, patterns: Sequence[Pattern]) -> tuple[Pattern, re.Match[str]] | None:
    """Takes a log message (without its time and level). Returns the first pattern it matches
    and the match, or None."""
    for p in patterns:
        m = p.regex.search(text)
        if m:
            return p, m
    return None


def _wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def read_node_log(path: Path, node: str, start_unix: float, names: Mapping[str, str],
                  patterns: Sequence[Pattern], label: str
                  ) -> tuple[list[LogEvent], LogCoverage | None]:
    """Takes one log file, the node that wrote it, the wall clock at history time 0, the node
    names (`node_names`), the patterns and the file's label for evidence ("n1/rabbit.log").
    Returns its events and the span it covers (None for a file with no timestamped line)."""
    events: list[LogEvent] = []
    first = last = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, start=1):
            m = LINE.match(raw.rstrip("\n"))
            if not m:
                continue
            t = int((_wall(m.group(1)) - start_unix) * NS)
            first = t if first is None else first
            last = t
            hit = parse_line(m.group(3), patterns)
            if hit is None:
                continue
            pattern, found = hit
            groups = found.groupdict()
            peer = groups.get("peer")
            if peer:
                host = NODE_NAME.search(peer)
                peer = names.get(host.group(1), peer) if host else peer
            term = groups.get("term")
            events.append(LogEvent(t, node, pattern.kind, pattern.detector, f"{label}:{lineno}",
                                   m.group(3).strip()[:300], peer,
                                   int(term) if term else None, groups.get("queue")))
    cover = None if first is None or last is None else LogCoverage(node, first, last)
    return events, cover


def read_events(nodes_dir: Path, start_unix: float, nodes: Mapping[str, str],
                line: str | None = None) -> tuple[list[LogEvent], dict[str, LogCoverage]]:
    """Takes a run's nodes/ directory, the wall clock at history time 0, test.json's nodes
    ({name: address}) and the broker's release line (`patterns_for`). Returns every node's events in time order and the
    span each node's logs cover (a node with no log is missing from it)."""
    names = node_names(nodes)
    patterns = patterns_for(line)
    events: list[LogEvent] = []
    cover: dict[str, LogCoverage] = {}
    for path in sorted(nodes_dir.glob("*/rabbit*.log")):
        if path.name.endswith("_upgrade.log"):
            continue
        node = path.parent.name
        found, span = read_node_log(path, node, start_unix, names, patterns,
                                    f"{node}/{path.name}")
        events += found
        if span is not None:
            old = cover.get(node)
            cover[node] = span if old is None else LogCoverage(
                node, min(old.first_ns, span.first_ns), max(old.last_ns, span.last_ns))
    events.sort(key=lambda e: (e.time_ns, e.node, e.evidence))
    return events, cover


def detections(events: Iterable[LogEvent]) -> list[LogEvent]:
    """Takes events. Returns those of a failure detector, in the order given."""
    return [e for e in events if e.detector is not None]
