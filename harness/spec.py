"""The test spec: everything that defines a run, as a frozen dataclass saved to test.json.

A spec is built from defaults, a named scenario and command-line options, and
validated before anything starts: an impossible option raises `SpecError`
(the CLI exits 2 with its message). `to_dict` is what test.json records, and
`spec_from_dict` reads it back. How the history is judged is the checkers'
own settings object (`checkers.CheckOptions`, `TestSpec.check`): test.json
records its recorded settings only, and a stored check section missing some
(a run stored before they existed) reads with their defaults.

Faults bite by default: a fault whose duration nobody set lasts
`DETECTION_FACTOR` x the broker's net_ticktime (`resolved`), so that RabbitMQ,
which declares a silent peer down after 0.75-1.25 x net_ticktime, notices it and
has time to act on it while it lasts; changing net_ticktime moves it. A shorter
fault asked for by name is played as asked, with a warning (`warnings`) before
the run and the strength verdict after it. `broker_differences` says where the
harness's broker settings differ from RabbitMQ's own defaults, and why.

Whether the queue came back after the faults is judged too (checkers.liveness),
within a bound after the last heal (`liveness_bound`); the workload runs on past
the time limit after the last heal for up to `after_heal_limit_s`, that bound
plus the clients' own timeouts unless `after_heal_s` says otherwise, and stops
as soon as confirms and deliveries are seen back (harness.runner).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from checkers.liveness import LivenessBound
from checkers.options import CheckOptions
from clusters.backend import BackendConfigError, BackendOptions
from clusters.rabbitmq import BrokerConfig
from clusters.registry import check_options
from clusters.releases import METADATA_STORES, lines_with_store, release
from harness.errors import HarnessError
from harness.recovery import liveness_bound
from nemesis import NemesisConfigError, NemesisOptions
from workloads.clients import ClientOptions
from workloads.kinds import QueueKind, kind_of
from workloads.priorities import levels as priority_levels
from workloads.queue_spec import QueueConfigError, QueueSpec
from workloads.queue_workload import WorkloadConfigError, WorkloadOptions

MAX_NODES = 9
# A fault nobody timed lasts this many net_ticktimes: detection by 1.25, then time to act.
DETECTION_FACTOR = 2.0
# The channel tick (ms) a consumer-timeout run sets on a line whose channel evaluates consumer
# timeouts on its tick (4.0: channel_tick_interval, 60 s by default): a delivery held past a
# 5 s timeout is then caught within a second, as 4.3's queue catches it, not up to a minute
# late (or never, when its consumer acks it first). Recorded in test.json's spec.broker.
CONSUMER_TIMEOUT_TICK_MS = 1000
# RabbitMQ's own defaults where the harness sets its own, and why it does.
RABBITMQ_DEFAULTS: dict[str, tuple[Any, str]] = {
    "partition_handling": ("ignore", "pause_minority is RabbitMQ's recommended setting for "
                           "three or more nodes and heals the cluster without an operator"),
    "net_ticktime": (60, "a partition is noticed in 7.5-12.5 s instead of 45-75 s, so runs "
                     "stay minutes long"),
    "channel_tick_interval_ms": (60_000, "RabbitMQ 4.0's channel evaluates a consumer timeout "
                                 "on this tick: a consumer-timeout run's held deliveries are "
                                 "then caught within a second, as 4.3's queue catches them"),
}


class SpecError(HarnessError, ValueError):
    """An option or combination of options that cannot make a test."""


@dataclass(frozen=True)
class TestSpec:
    """A whole test: cluster, broker, queue, workload, nemesis, timing and checking."""

    __test__ = False  # not a pytest class

    name: str = "partition"
    nodes: int = 3
    time_limit_s: float = 60.0
    seed: int | None = None
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    queue: QueueSpec = field(default_factory=QueueSpec)
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    nemesis: NemesisOptions = field(default_factory=NemesisOptions)
    check: CheckOptions = field(default_factory=CheckOptions)
    backend: BackendOptions = field(default_factory=BackendOptions)
    recovery_timeout_s: float = 240.0
    # How long at most the workload runs on after the last heal, so that liveness can be judged
    # (it stops sooner once confirms and deliveries are back); None: `after_heal_limit_s`'s
    # default, derived from the liveness bound; 0: the main phase ends at the time limit.
    after_heal_s: float | None = None
    placement_interval_s: float = 5.0
    boot_timeout_s: float = 120.0
    store: str = "store"
    description: str = ""
    # The metadata store the test is about (the Khepri minority's scenarios), None: any. A
    # release line or store without it refuses the spec (`refusal`).
    needs_metadata_store: str | None = None

    def with_seed(self) -> TestSpec:
        """Returns the spec with a seed drawn at random when none was given."""
        if self.seed is not None:
            return self
        return dataclasses.replace(self, seed=random.SystemRandom().randrange(2**31))

    def validate(self) -> None:
        """Raises SpecError naming the first impossible option."""
        self._check_own()
        try:
            self.broker.validate()
            self.queue.validate(self.nodes)
            self.workload.validate()
        except (ValueError, QueueConfigError, WorkloadConfigError) as e:
            raise SpecError(str(e)) from e
        kind = kind_of(self.queue)
        self._check_kind(kind)
        try:
            self.nemesis.validate([f"n{i}" for i in range(1, self.nodes + 1)],
                                  time_limit_s=self.time_limit_s)
        except NemesisConfigError as e:
            raise SpecError(str(e)) from e
        self._check_fault_queue(kind.name)
        self._check_fault_reach()
        self._check_stay()
        why = self.refusal()
        if why:
            raise SpecError(why)
        try:
            check_options(self.backend_as_run(), self.nodes, self.broker.rabbitmq)
        except BackendConfigError as e:
            raise SpecError(str(e)) from e

    def refusal(self) -> str | None:
        """Returns why the spec's release line cannot run it, in the release table's sentence
        (a mirrored queue on 4.0 or 4.3; on 4.3 a partition handling, the Mnesia store, a
        transient queue without the permission; a test about a metadata store the run does not
        have, `store_refusal`; its publishers' message priorities: none on 3.10, one beyond a
        strict line's levels), or None when it can. `validate` refuses
        such a spec; a matrix or an explorer lists it as not applicable instead of running it."""
        line = release(self.broker.rabbitmq)
        transient = None if self.queue.durable else line.transient_queue_refusal(
            self.broker.permit_transient_queues)
        try:
            used = priority_levels(self.workload.priorities)
        except ValueError:  # an unreadable distribution: `validate` says what is wrong
            used = []
        return (line.refuses_kind(kind_of(self.queue).name) or self.broker.refusal()
                or transient or self.store_refusal()
                or line.delayed_retry_refusal(self.queue.delayed_retry_set())
                or line.disconnected_timeout_refusal(
                    self.queue.consumer_disconnected_timeout_ms is not None)
                or line.consumer_timeout_refusal(
                    self.workload.client.consumer_timeout_ms is not None)
                or line.refuses_priorities(used))

    def store_refusal(self) -> str | None:
        """Returns why the run's metadata store is not the one the test is about
        (`needs_metadata_store`), naming the release lines that have it (from the release
        table), or None."""
        need, store = self.needs_metadata_store, self.broker.store
        if need is None or store == need:
            return None
        return (f"{self.name} needs the {need.capitalize()} metadata store "
                f"({lines_with_store(need)}), not {store.capitalize()}")

    def _check_own(self) -> None:
        """Raises SpecError for an impossible name, node count, time limit, interval or
        timeout: the spec's own fields, not its parts'."""
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise SpecError(f"test name {self.name!r} must be letters, digits, - _ .")
        if not 1 <= self.nodes <= MAX_NODES:
            raise SpecError(f"node count must be 1..{MAX_NODES}, got {self.nodes}")
        if not self.time_limit_s > 0:
            raise SpecError(f"time limit must be > 0 seconds, got {self.time_limit_s}")
        if self.placement_interval_s < 0:
            raise SpecError("placement interval must be >= 0 (0: no sampling)")
        if self.recovery_timeout_s <= 0 or self.boot_timeout_s <= 0:
            raise SpecError("recovery and boot timeouts must be > 0")
        if self.needs_metadata_store not in (None, *METADATA_STORES):
            raise SpecError(f"needs_metadata_store {self.needs_metadata_store!r} is no metadata "
                            f"store; known: {', '.join(METADATA_STORES)}")
        if self.after_heal_s is not None and not self.after_heal_s >= 0:
            raise SpecError(f"after_heal_s must be >= 0 seconds (0: no time after the last "
                            f"heal), got {self.after_heal_s}")

    def _check_stay(self) -> None:
        """Raises SpecError when staying publishers would give up on a confirm sooner than the
        liveness bound: a publish they abandon could then never be judged stuck
        (checkers.settlement), naming both values."""
        w = self.workload
        bound_s = self.liveness_bound().bound_ns / 1e9
        if w.publishers_stay and w.confirm_deadline_s < bound_s:
            raise SpecError(
                f"--confirm-deadline {w.confirm_deadline_s:g} s is shorter than the liveness "
                f"bound {bound_s:g} s (1.25 x net_ticktime {self.broker.net_ticktime} s + the "
                f"recovery's grace): with --stay {w.stay} a publisher must wait at least that "
                f"long for a confirm, or a stuck one is never judged")

    def after_heal_floor_s(self) -> float:
        """Returns how long at least the workload runs on after the last heal: with staying
        clients the liveness bound and a second (the tail may not stop at the first confirm
        seen: a channel stuck beside a served one is judged only at the bound), else 0."""
        if self.workload.stay == "none" or self.after_heal_s == 0:
            return 0.0
        return round(self.liveness_bound().bound_ns / 1e9 + 1.0, 3)

    def _check_kind(self, kind: QueueKind) -> None:
        """Takes the queue's kind. Raises SpecError when the workload or the check does not fit
        it: a backlog longer than the queue's max length, a prefetch below the kind's, a check
        rule the kind needs set otherwise."""
        length = self.queue.max_length
        if length is not None and self.workload.backlog > length:
            raise SpecError(
                f"a backlog of {self.workload.backlog} messages cannot stand in a queue of max "
                f"length {length} (its overflow, {self.queue.overflow or 'drop-head'}, would "
                f"{'nack' if self.queue.overflow == 'reject-publish' else 'discard'} the rest)")
        if self.workload.client.prefetch < kind.min_prefetch:
            raise SpecError(f"{kind.name} consumers need a prefetch >= {kind.min_prefetch}")
        if priority_levels(self.workload.priorities) and not kind.takes_priorities:
            raise SpecError(f"--priorities applies to quorum queues, not {kind.name} (the "
                            f"priority check models a quorum queue's strict levels; "
                            f"--max-priority only declares x-max-priority, the check does not "
                            f"judge a classic queue's priorities)")
        clash = [k for k, v in kind.check_rules().items() if getattr(self.check, k) != v]
        if clash:
            raise SpecError(f"a {kind.name} test needs {', '.join(clash)} = "
                            f"{kind.check_rules()[clash[0]]} ({kind.summary}; use for_queue)")

    def _check_fault_queue(self, kind: str) -> None:
        """Raises SpecError for a fault entry that cannot act on the test's queue kind (a quorum
        member removed from a classic queue)."""
        from nemesis.faults import fault_info

        for entry in self.nemesis.entries():
            info = fault_info(entry.fault)
            if info.queue_kinds and kind not in info.queue_kinds:
                raise SpecError(f"fault {entry.text} acts on a {' or '.join(info.queue_kinds)} "
                                f"queue; this test's queue is {kind}")

    def _check_fault_reach(self) -> None:
        """Raises SpecError for a fault entry on a backend it cannot act on (a disk corruption
        on a backend that keeps no data directory it can reach), or a fault that may hit only a
        minority (FaultInfo.minority_only) with targets that may select more."""
        from nemesis.faults import fault_info
        from nemesis.targets import leaves_a_majority, most_selected

        for entry in self.nemesis.entries():
            info = fault_info(entry.fault)
            if info.backends and self.backend.kind not in info.backends:
                raise SpecError(f"fault {entry.text} acts on the {' or '.join(info.backends)} "
                                f"backend only (it reaches the nodes' data directories there); "
                                f"this test's backend is {self.backend.kind}")
            targets = entry.targets or self.nemesis.targets
            if info.minority_only and not leaves_a_majority(targets, self.nodes):
                raise SpecError(
                    f"fault {entry.text} may hit only a minority of the {self.nodes} nodes (what "
                    f"a majority's disks lose, the queue cannot promise to keep); targets "
                    f"{targets!r} may select {most_selected(targets, self.nodes)}: use one, "
                    f"minority, leader or follower, on 3 nodes or more")

    def resolved(self) -> TestSpec:
        """Returns the spec as it runs: the faults nobody timed lasting DETECTION_FACTOR x
        net_ticktime (the module's docstring), the broker settings nobody set the release
        line's own (BrokerConfig.resolved), the nodes' data directories on the unsynced layer
        when a fault needs it (a power loss: `backend_as_run`); idempotent."""
        spec = dataclasses.replace(self, broker=self.broker.resolved(),
                                   backend=self.backend_as_run())
        spec = spec.consumer_timeout_as_run()
        if spec.nemesis.duration_s is not None:
            return spec
        auto = DETECTION_FACTOR * spec.broker.net_ticktime
        return dataclasses.replace(spec, nemesis=dataclasses.replace(spec.nemesis,
                                                                     duration_s=auto))

    def consumer_timeout_as_run(self) -> TestSpec:
        """Returns the spec with its consumer timeout where the release line reads it: on a line
        that reads only the queue's (4.0), the queue declared with it (queue.consumer_timeout_ms;
        the consumers then send none) and, where the line's channel evaluates it on a tick,
        that tick CONSUMER_TIMEOUT_TICK_MS unless set; else as it is. Idempotent."""
        ms = self.workload.client.consumer_timeout_ms
        line = release(self.broker.rabbitmq)
        if ms is None or not line.consumer_timeout_on_queue or self.queue.consumer_timeout_ms:
            return self
        broker = self.broker
        if line.consumer_timeout_tick_ms is not None and broker.channel_tick_interval_ms is None:
            broker = dataclasses.replace(broker, channel_tick_interval_ms=CONSUMER_TIMEOUT_TICK_MS)
        return dataclasses.replace(self, broker=broker,
                                   queue=dataclasses.replace(self.queue, consumer_timeout_ms=ms))

    def backend_as_run(self) -> BackendOptions:
        """Returns the backend options the run uses: `unsynced_fs` on when asked for or when a
        fault entry needs it (a power loss without the layer would be a mere kill, and the
        layer costs every write of the broker: only the runs that need it pay)."""
        from nemesis.faults import INFO

        try:
            entries = self.nemesis.entries()
        except NemesisConfigError:  # validate says what is wrong with them
            return self.backend
        needs = any(e.fault in INFO and INFO[e.fault].needs_unsynced_fs for e in entries)
        if self.backend.unsynced_fs or not needs:
            return self.backend
        return dataclasses.replace(self.backend, unsynced_fs=True)

    def liveness_bound(self) -> LivenessBound:
        """Returns the bound the liveness check judges this spec's runs by: 1.25 x net_ticktime
        plus the recovery's grace, at most its timeout (harness.recovery.liveness_bound)."""
        return liveness_bound(float(self.broker.net_ticktime), self.recovery_timeout_s,
                              source="spec")

    def after_heal_limit_s(self) -> float:
        """Returns how long at most the workload runs on after the last heal: `after_heal_s`,
        else the liveness bound plus a publish's timeout and a reconnection's (a client of a
        node still stuck at the bound is refused, and recorded so, after it), at least
        `after_heal_floor_s`."""
        if self.after_heal_s is not None:
            return self.after_heal_s
        client = self.workload.client
        return max(self.after_heal_floor_s(), round(
            self.liveness_bound().bound_ns / 1e9 + client.publish_timeout_s
            + client.connect_timeout_s, 3))

    def detection_s(self) -> tuple[float, float]:
        """Returns when RabbitMQ declares a silent peer down, (0.75, 1.25) x net_ticktime."""
        return 0.75 * self.broker.net_ticktime, 1.25 * self.broker.net_ticktime

    def warnings(self) -> list[str]:
        """Returns a sentence for each fault entry that RabbitMQ can notice only by its silence
        (a partition, a pause, a packet fault) and that heals before its failure detector can
        fire: it may heal unnoticed (the run's strength will say); then for each broker setting
        that does not apply (`not_applying`) and each reason the priority check will not judge
        (`priority_warnings`)."""
        from history.faults import kind_named
        from nemesis.faults import fault_info

        low, high = self.detection_s()
        spec = self.resolved()
        out = self.not_applying() + self.priority_warnings()
        for entry, lasts in spec.nemesis.timed_entries():  # a schedule's items: their own
            info = fault_info(entry.fault)
            if kind_named(info.kind.name).silent and lasts is not None and lasts < high:
                out.append(
                    f"fault {entry.text} lasts {lasts:g} s, but RabbitMQ declares a silent peer "
                    f"down only after {low:g}-{high:g} s (net_ticktime "
                    f"{self.broker.net_ticktime} s): it may heal unnoticed, and the run's "
                    f"verdict will say so (valid but weak)")
        return out

    def not_applying(self) -> list[str]:
        """Returns a sentence for each broker setting that does not apply to the run's release
        and metadata store (test.json keeps them with the warnings), rather than passing it
        silently."""
        store, handling = self.broker.store, self.broker.handling
        if handling is None or release(self.broker.rabbitmq).partition_handling_applies(store):
            return []
        return [f"cluster_partition_handling = {handling} does not apply "
                f"to the {store} metadata store: it is a Raft store, and a minority stops "
                f"serving metadata whatever the setting (RabbitMQ documents that Khepri behaves "
                f"like pause_minority); quorum queues and streams are Raft too"]

    def priority_warnings(self) -> list[str]:
        """Returns a sentence for each reason the priority check will not judge a run whose
        publishers give priorities, or judge it only in part: a release line whose quorum
        queues serve priorities at a ratio rather than strictly (two levels: their rule only;
        more: not at all), consumers with a prefetch other than 1."""
        try:
            if not priority_levels(self.workload.priorities):
                return []
        except ValueError:
            return []
        line = release(self.broker.rabbitmq)
        out = []
        if line.priority_levels == 2 and not line.strict_priority:
            out.append(f"RabbitMQ {line.line}'s quorum queues have 2 priority levels served at "
                       f"a ratio, not strictly: the priority check judges the two-level rule "
                       f"only (a normal message published after a ready high one was "
                       f"confirmed must not go first)")
        elif line.priority_levels is not None and not line.strict_priority:
            out.append(f"RabbitMQ {line.line}'s quorum queues have {line.priority_levels} "
                       f"priority levels served at a ratio, not strictly: the priority check "
                       f"will say it does not apply")
        prefetch = self.workload.client.prefetch
        if prefetch != 1:
            out.append(f"consumers with prefetch {prefetch or 'unlimited'}: the priority check "
                       f"judges deliveries to consumers of prefetch 1 only (--prefetch 1)")
        return out

    def broker_differences(self) -> list[dict[str, Any]]:
        """Returns where the broker settings differ from RabbitMQ's own defaults: each
        {"setting", "harness", "rabbitmq", "why"} (test.json's `broker_differences`)."""
        out = []
        ran = self.broker.resolved()
        for name, (theirs, why) in RABBITMQ_DEFAULTS.items():
            ours = getattr(ran, name)
            if ours is not None and ours != theirs:
                out.append({"setting": name, "harness": ours, "rabbitmq": theirs, "why": why})
        return out

    def for_queue(self) -> TestSpec:
        """Returns the spec with the check rules its queue kind imposes (workloads.kinds): for a
        stream, where every consumer reads every message, duplicates do not invalidate (lost,
        unexpected and order still do)."""
        rules = kind_of(self.queue).check_rules()
        if not rules:
            return self
        changes: dict[str, Any] = dict(rules)
        return dataclasses.replace(self, check=dataclasses.replace(self.check, **changes))

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as plain JSON-able data (the check's recorded settings only)."""
        d = dataclasses.asdict(self)
        d["check"] = self.check.recorded()
        return d


def spec_from_dict(d: dict[str, Any]) -> TestSpec:
    """Takes a dict like `TestSpec.to_dict()` gives (keys may be missing: a key added since
    takes the default, or where `_ADDED` says, what an older file's run did). Returns the spec.

    Raises SpecError for an unknown key.
    """
    def build(cls: Any, data: dict[str, Any]) -> Any:
        names = {f.name: f for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if (cls, k) not in _RETIRED}
        unknown = set(data) - set(names)
        if unknown:
            raise SpecError(f"unknown {cls.__name__} option(s): {', '.join(sorted(unknown))}")
        kwargs: dict[str, Any] = {}
        for (owner, key), absent in _ADDED.items():
            if owner is cls and key not in data:
                data[key] = absent(data)
        for k, v in data.items():
            sub = _NESTED.get((cls, k))
            if sub is not None and isinstance(v, dict):
                kwargs[k] = build(sub, v)
            elif isinstance(v, list) and k in ("faults", "extra", "schedule"):
                kwargs[k] = tuple(tuple(x) if isinstance(x, list) else x for x in v)
            else:
                kwargs[k] = v
        return cls(**kwargs)

    return build(TestSpec, d)


# Keys older test.json files have that a spec no longer takes (the cookie is drawn per cluster).
_RETIRED: frozenset[tuple[Any, str]] = frozenset({(BrokerConfig, "cookie")})

# Keys added since older test.json files were written, whose absence means another value than a
# new spec's default: what such a file's run did. The layers' settle before the main phase
# (backend.settle_layers) came on 2026-11-28; a run on the layer before it was not settled (one
# without the layer had nothing to settle, and reads the default).
_ADDED: dict[tuple[Any, str], Callable[[dict[str, Any]], Any]] = {
    (BackendOptions, "settle_layers"): lambda backend: not backend.get("unsynced_fs", False),
}

_NESTED: dict[tuple[Any, str], Any] = {
    (TestSpec, "broker"): BrokerConfig,
    (TestSpec, "queue"): QueueSpec,
    (TestSpec, "workload"): WorkloadOptions,
    (TestSpec, "nemesis"): NemesisOptions,
    (TestSpec, "check"): CheckOptions,
    (TestSpec, "backend"): BackendOptions,
    (WorkloadOptions, "client"): ClientOptions,
}
