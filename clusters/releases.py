"""RabbitMQ release lines the harness tests, and what differs between them, in one table.

A run chooses a release line (`--rabbitmq 3.10|4.0`, the spec's `broker.rabbitmq`). Each line is
one `Release` record: what the broker offers (queue kinds, metadata stores, a quorum queue's
default delivery limit), how the harness asks it about a queue (the `list_queues` columns that
exist), and where the local backend gets its binaries (this host's Debian packages, or a Debian
root filesystem built by clusters.rootfs and entered with chroot). Code elsewhere asks the
record; nothing else tests a version string (`line_of` parses one, `known_line` maps it to the
record whose answers hold for it). The broker log patterns live with the checkers
(`checkers.broker_log.PATTERNS`), which never import this package, keyed by the same lines: the
harness hands them the `known_line` of the version the nodes reported.

`Launcher`s wrap a broker command so that it runs the chosen release's binaries: the host's own
as they are, or a root filesystem's through `chroot_argv` (a private mount namespace with /proc
and the node's data folder mounted at the same paths inside the tree).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from clusters.errors import ClusterError

DEFAULT_LINE = "3.10"
RABBIT_BIN = "/usr/lib/rabbitmq/bin"
METADATA_STORES: tuple[str, ...] = ("mnesia", "khepri")
# The store a run used when its record names none (runs stored before 4.3, whose lines all
# defaulted to Mnesia); a line's own default is `Release.default_metadata_store`.
DEFAULT_METADATA_STORE = METADATA_STORES[0]
# The partition handling the harness gives a line that has the setting when a spec names none:
# RabbitMQ's recommendation for three or more nodes (its own default is ignore).
DEFAULT_PARTITION_HANDLING = "pause_minority"
_VERSION = re.compile(r"(\d+)\.(\d+)")


class ReleaseError(ClusterError, ValueError):
    """A release line the harness does not know, or an option the release cannot honour."""


@dataclass(frozen=True)
class Release:
    """One RabbitMQ release line and what the harness must know about it.

    line: "3.10", "4.0".
    rootfs: the root filesystem recipe the local backend runs it from (clusters.rootfs), or None
      when this host's own packages provide it.
    removed_kinds: queue kinds the release no longer has, each with the sentence that says so.
    metadata_stores: the metadata stores it can run (the first is its default).
    delivery_limit: a quorum queue's delivery limit when none is set (None: unlimited).
    placement_columns: the `list_queues` columns that say where a queue lives.
    partition_handling_applies: whether cluster_partition_handling governs its metadata store
      (Khepri is a Raft store: a minority stops serving metadata whatever the setting).
    priority_levels: how many message priority levels a quorum queue has (None: none, the
      priority property is ignored). 4.0-4.2 have two, normal (0-4, and no priority) and high
      (above 4), served at a ratio (2:1) rather than strictly; 4.3 has 32 (0-31), strict.
    strict_priority: whether a quorum queue dispatches every ready message of a higher priority
      before any of a lower one (subject to prefetch), so that the harness can judge the order
      (checkers.spark_priority).
    joiners_wait_for_first: whether a new cluster's other nodes start only once its first node
      has booted. 4.0's peer discovery joins the oldest reachable node whose database is ready,
      counting itself, so a joiner that cannot reach the first node yet (or whose VM started
      first) selects itself and boots alone ("node 'rabbit@...' selected for auto-clustering"),
      to be joined by hand later; 3.10 retries the nodes it lists until one answers.
    joiners_start_when_first_answers: whether, on a line whose joiners wait for the first node,
      they may start as soon as its VM answers (erl_call), rather than once it has booted.
      4.3's peer discovery (rabbit_peer_discovery, read from 4.3.6) asks the nodes a joiner lists
      and itself, sorts those that answer by their members, then by when their VM started, and
      retries (discovery_retry_interval) while fewer than two answer or while the one it sorted
      first has no database ready yet; a first node whose VM answers started before any joiner
      was spawned, so it sorts before every joiner and none selects itself. The joiners' boot
      then overlaps the first node's (the cluster's ready time is no longer their sum).
    partitions_call: the (module, function) a node answers the nodes it is partitioned from with,
      as `cluster_status` reports them (rabbit_node_monitor:partitions/0, Mnesia's view), or
      None on a line whose `cluster_status` reports none: 4.3 has neither Mnesia nor that
      function, and its CLI's status (rabbit_khepri:cli_cluster_status/0) says `partitions: []`
      whatever the network does.
    no_partition_handling: why the line has no cluster_partition_handling at all, or None when
      it has it (4.3 removed Mnesia and its partition handling strategies: the key is accepted
      and ignored, so a spec that sets it is refused rather than run as if it applied).
    transient_queues_denied: why the line refuses transient (non-durable) non-exclusive queues
      unless every node permits the deprecated feature, or None when it takes them as they are.
    ra_query_mfa: whether Ra's leader_query takes its query only as an {M, F, A} tuple (Ra 3,
      RabbitMQ 4.3: a fun raises function_clause there), not as a fun (Ra 2).
    caveat: what every result of the line should say beside its version (4.3: the Erlang it
      runs on is one RabbitMQ does not list as supported), or None.
    no_delayed_retry: why the line's quorum queues have no delayed retry (x-delayed-retry-type,
      -min, -max: came in 4.3), or None when they have it.
    no_consumer_timeout_argument: why the line takes no consumer timeout the harness can set
      per run (3.10: rabbitmq.conf's consumer_timeout only), or None.
    consumer_timeout_on_queue: whether the line reads a consumer timeout from the queue's
      x-consumer-timeout argument (or policy) only, not from the consumer's basic.consume
      argument (4.0: rabbit_channel:get_queue_consumer_timeout, v4.0.5): the harness then
      declares the queue with it (harness.spec.TestSpec.resolved).
    consumer_timeout_tick_ms: how often the line's channel evaluates a consumer timeout, by
      default (4.0: rabbit_channel's tick, channel_tick_interval, 60 s; not a rabbitmq.conf
      key), or None where the queue evaluates it (4.3's rabbit_fifo, at once).
    no_disconnected_timeout: why the line's quorum queues take no
      x-consumer-disconnected-timeout (came in 4.3: before it, a consumer's messages were
      returned as soon as its node was disconnected), or None.
    timeout_cancels: whether a consumer past its timeout is sent basic.cancel when its client
      advertises consumer_cancel_notify (4.3), rather than having its channel closed with 406
      precondition_failed (before 4.3).
    """

    line: str
    rootfs: str | None
    removed_kinds: tuple[tuple[str, str], ...] = ()
    metadata_stores: tuple[str, ...] = (DEFAULT_METADATA_STORE,)
    delivery_limit: int | None = None
    placement_columns: tuple[str, ...] = (
        "name", "type", "leader", "members", "pid", "slave_pids", "synchronised_slave_pids")
    joiners_wait_for_first: bool = False
    joiners_start_when_first_answers: bool = False
    partitions_call: tuple[str, str] | None = ("rabbit_node_monitor", "partitions")
    no_partition_handling: str | None = None
    transient_queues_denied: str | None = None
    ra_query_mfa: bool = False
    caveat: str | None = None
    no_delayed_retry: str | None = (
        "delayed retry (x-delayed-retry-type, -min, -max) came with RabbitMQ 4.3's quorum "
        "queues; an older broker ignores the arguments. Choose --rabbitmq 4.3")
    no_consumer_timeout_argument: str | None = None
    consumer_timeout_on_queue: bool = False
    consumer_timeout_tick_ms: int | None = None
    no_disconnected_timeout: str | None = (
        "x-consumer-disconnected-timeout came with RabbitMQ 4.3's quorum queues (before it, a "
        "consumer's messages were returned as soon as its node was disconnected: the "
        "behaviour 0 asks 4.3 for); an older broker ignores the argument. Choose --rabbitmq 4.3")
    timeout_cancels: bool = False
    priority_levels: int | None = None
    strict_priority: bool = False

    def delayed_retry_refusal(self, set_: bool) -> str | None:
        """Takes whether a spec sets delayed retry. Returns why this line refuses it, or None."""
        return f"--delayed-retry-type: {self.no_delayed_retry}" if set_ and \
            self.no_delayed_retry else None

    def disconnected_timeout_refusal(self, set_: bool) -> str | None:
        """Takes whether a spec sets x-consumer-disconnected-timeout. Returns why this line
        refuses it, or None."""
        return f"--consumer-disconnected-timeout: {self.no_disconnected_timeout}" if set_ and \
            self.no_disconnected_timeout else None

    def consumer_timeout_refusal(self, set_: bool) -> str | None:
        """Takes whether a spec sets a per-consumer timeout. Returns why this line refuses it,
        or None."""
        return f"--consumer-timeout-ms: {self.no_consumer_timeout_argument}" if set_ and \
            self.no_consumer_timeout_argument else None

    @property
    def default_metadata_store(self) -> str:
        """Returns the metadata store a run of this line uses when its spec names none."""
        return self.metadata_stores[0]

    def refuses_kind(self, kind: str) -> str | None:
        """Takes a queue kind's name. Returns why this release cannot run it, or None."""
        return dict(self.removed_kinds).get(kind)

    def metadata_store_refusal(self, store: str) -> str | None:
        """Takes a metadata store's name. Returns why this release cannot run it, or None."""
        if store not in METADATA_STORES:
            return f"unknown metadata store {store!r}; known: {', '.join(METADATA_STORES)}"
        if store in self.metadata_stores:
            return None
        if self.no_partition_handling is not None and store == "mnesia":
            return (f"--metadata-store mnesia: RabbitMQ {self.line} has no Mnesia; Khepri, its "
                    f"Raft metadata store, is the only one")
        can = [line for line, r in RELEASES.items() if store in r.metadata_stores]
        return (f"--metadata-store {store}: RabbitMQ {self.line} has no {store} metadata store "
                f"(it needs {' or '.join(can)})")

    def check_metadata_store(self, store: str) -> None:
        """Raises ReleaseError when this release cannot run the metadata store."""
        why = self.metadata_store_refusal(store)
        if why:
            raise ReleaseError(why)

    def partition_handling_refusal(self, handling: str | None) -> str | None:
        """Takes the partition handling a spec sets (None: none set). Returns why this line
        refuses it, or None."""
        if handling is None or self.no_partition_handling is None:
            return None
        return f"--partition-handling {handling}: {self.no_partition_handling}"

    def partition_handling_of(self, handling: str | None) -> str | None:
        """Takes the partition handling a spec sets (None: none set). Returns the one the nodes
        run with: the spec's, else the harness's default on a line that has the setting, else
        None (the line has none)."""
        if self.no_partition_handling is not None:
            return None
        return handling or DEFAULT_PARTITION_HANDLING

    def refuses_priorities(self, priorities: Iterable[int]) -> str | None:
        """Takes the message priorities a run's publishers use (AMQP's 0-255). Returns why a
        quorum queue of this release cannot honour them (none at all: it has no priorities; a
        strict line: one beyond its levels, which it would fold into its highest), or None."""
        used = sorted(set(priorities))
        if not used:
            return None
        if self.priority_levels is None:
            return (f"RabbitMQ {self.line}'s quorum queues have no message priorities (they "
                    f"ignore the property; quorum queues have them from 4.0): publish without "
                    f"priorities, or choose a later release")
        beyond = [p for p in used if p >= self.priority_levels]
        if self.strict_priority and beyond:
            return (f"RabbitMQ {self.line}'s quorum queues have {self.priority_levels} priority "
                    f"levels, 0-{self.priority_levels - 1}: priority "
                    f"{', '.join(map(str, beyond))} is not one")
        return None

    def partition_handling_applies(self, store: str) -> bool:
        """Takes the metadata store. Returns whether cluster_partition_handling governs it."""
        return self.no_partition_handling is None and store == DEFAULT_METADATA_STORE

    def transient_queue_refusal(self, permitted: bool) -> str | None:
        """Takes whether the spec permits the deprecated transient non-exclusive queues on every
        node. Returns why a transient non-exclusive queue cannot run, or None."""
        return None if permitted else self.transient_queues_denied

    def permission_refusal(self) -> str | None:
        """Returns why --permit-transient-queues does not apply to this line (it takes such
        queues without a permission), or None where it does."""
        if self.transient_queues_denied is not None:
            return None
        return (f"--permit-transient-queues: RabbitMQ {self.line} takes transient non-exclusive "
                f"queues without a permission; the setting would be ignored")


RELEASES: dict[str, Release] = {
    "3.10": Release(
        "3.10", rootfs=None,
        no_consumer_timeout_argument=(
            "RabbitMQ 3.10 takes no x-consumer-timeout, as a consumer's or a queue's "
            "argument (3.10 has only rabbitmq.conf's consumer_timeout) and would ignore it. "
            "Choose --rabbitmq 4.0 or 4.3")),
    "4.0": Release(
        "4.0", rootfs="4.0",
        removed_kinds=(("mirrored", "classic queue mirroring was removed in RabbitMQ 4.0; "
                                    "test quorum queues or streams, or choose --rabbitmq 3.10"),),
        metadata_stores=("mnesia", "khepri"),
        delivery_limit=20,
        placement_columns=("name", "type", "leader", "members", "pid"),
        joiners_wait_for_first=True,
        priority_levels=2,
        # Its channel reads a consumer timeout from the queue's x-consumer-timeout argument or
        # consumer-timeout policy, else rabbitmq.conf's consumer_timeout, never from the
        # consumer's argument (seed 4001 of the consumer-timeout scenarios sent only that: no
        # consumer ended), and evaluates it on its tick.
        consumer_timeout_on_queue=True,
        consumer_timeout_tick_ms=60_000,
    ),
    "4.3": Release(
        "4.3", rootfs="4.3",
        priority_levels=32, strict_priority=True,
        removed_kinds=(("mirrored", "classic queue mirroring was removed in RabbitMQ 4.0; "
                                    "test quorum queues or streams, or choose --rabbitmq 3.10"),),
        metadata_stores=("khepri",),
        delivery_limit=20,
        placement_columns=("name", "type", "leader", "members", "pid"),
        joiners_wait_for_first=True,
        joiners_start_when_first_answers=True,
        partitions_call=None,
        no_partition_handling=(
            "RabbitMQ 4.3 has no cluster_partition_handling: Mnesia and its partition handling "
            "strategies were removed, and the key is accepted and ignored. Khepri, a Raft "
            "store, serves metadata only on the side with a majority; choose --rabbitmq 3.10 "
            "or 4.0 to test a strategy"),
        transient_queues_denied=(
            "RabbitMQ 4.3 refuses transient (non-durable) non-exclusive queues unless every "
            "node permits the deprecated feature transient_nonexcl_queues; add "
            "--permit-transient-queues to set that permission"),
        ra_query_mfa=True,
        no_delayed_retry=None,
        no_disconnected_timeout=None,
        timeout_cancels=True,
        caveat=("Debian unstable's RabbitMQ 4.3 runs on Erlang 29, which RabbitMQ's "
                "compatibility page does not list as supported for 4.3"),
    ),
}


def release(line: str) -> Release:
    """Takes a release line ("4.0"). Returns its record. Raises ReleaseError naming those known."""
    try:
        return RELEASES[line]
    except KeyError:
        raise ReleaseError(f"unknown RabbitMQ release {line!r}; known: "
                           f"{', '.join(RELEASES)}") from None


def lines_with_store(store: str) -> str:
    """Takes a metadata store's name. Returns where it runs, from the table, as a refusal says
    it: the lines whose default it is, then those that take it when asked ("RabbitMQ 4.3, or
    4.0 with --metadata-store khepri"); "no release line" when none has it."""
    own = [k for k, r in RELEASES.items() if r.default_metadata_store == store]
    asked = [k for k, r in RELEASES.items()
             if store in r.metadata_stores and r.default_metadata_store != store]
    parts = ([" or ".join(own)] if own else []) + (
        [f"{' or '.join(asked)} with --metadata-store {store}"] if asked else [])
    return "RabbitMQ " + ", or ".join(parts) if parts else "no release line"


def line_of(version: str) -> str | None:
    """Takes a version as a broker or a package manager reports it ("4.0.5", "3.10.8",
    "4.0.5-6"). Returns its release line ("4.0"), or None when it names none."""
    m = _VERSION.search(version or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def _line_key(line: str) -> tuple[int, int]:
    major, minor = line.split(".")
    return int(major), int(minor)


def known_line(version: str) -> str | None:
    """Takes a release line or version ("4.1.2", "3.10.8"). Returns the nearest line of RELEASES
    at or below it, whose answers hold for it until it has a record of its own (4.1 -> "4.0",
    3.13 -> "3.10"); None below every known line or for text that names no line."""
    line = line_of(version)
    if line is None:
        return None
    known = [k for k in RELEASES if _line_key(k) <= _line_key(line)]
    return max(known, key=_line_key) if known else None


def default_delivery_limit(version: str) -> int | None:
    """Takes a release line or version ("3.10", "4.1.2"). Returns the delivery limit RabbitMQ
    gives a quorum queue declared without one: that of its `known_line` (4.1 keeps 4.0's 20,
    3.13 has 3.10's none); None below every known line or for text that names no line."""
    line = known_line(version)
    return None if line is None else RELEASES[line].delivery_limit


class Launcher(Protocol):
    """Wraps a broker command (rabbitmq-server, rabbitmqctl, ...) so it runs the release's
    binaries, and says which RabbitMQ home they run from."""

    @property
    def home(self) -> str | None:
        """A home of the node's applications (clusters.server_home), where the node sees it;
        None: the release's own, at RABBIT_BIN."""
        ...

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """Takes a broker command. Returns the command to run in its place."""
        ...


@dataclass(frozen=True)
class HostLauncher:
    """The host's (or container's) own RabbitMQ: commands run as they are, from `home` when
    given (clusters.server_home), else from the release's own."""

    home: str | None = None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """Returns argv unchanged."""
        return list(argv)


# Run as `sh -c CHROOT_SCRIPT sh ROOT N DIR1..DIRN CMD...`, inside `unshare --mount` so that
# nothing it mounts is seen outside the command (and goes when its last process ends): /proc for
# the broker's scripts and Erlang, and each data folder bound at its own path inside the tree,
# so that paths in the node's environment mean the same inside and out.
CHROOT_SCRIPT = (
    'set -e; root="$1"; n="$2"; shift 2; '
    'mount -t proc proc "$root/proc"; '
    'while [ "$n" -gt 0 ]; do mkdir -p "$root$1"; mount --bind "$1" "$root$1"; '
    'shift; n=$((n - 1)); done; '
    'exec chroot "$root" "$@"'
)


def chroot_argv(root: str, binds: Sequence[str], argv: Sequence[str]) -> list[str]:
    """Takes a root filesystem, absolute folders to bind at the same paths inside it, and a
    command. Returns the command that runs it chrooted in a private mount namespace."""
    bad = [b for b in (root, *binds) if not b.startswith("/")]
    if bad:
        raise ReleaseError(f"chroot paths must be absolute: {bad}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", CHROOT_SCRIPT, "sh",
            root, str(len(binds)), *binds, *argv]


@dataclass(frozen=True)
class ChrootLauncher:
    """A release run from a root filesystem: every broker command chrooted into `root`, with
    `binds` (the run's broker data folder) visible at the same paths; from `home` when given
    (clusters.server_home: in a bound folder, its links naming the tree's files)."""

    root: str
    binds: tuple[str, ...]
    home: str | None = None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """Returns argv wrapped by chroot_argv."""
        return chroot_argv(self.root, self.binds, argv)
