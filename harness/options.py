"""The command line's options, declared once: one row of `OPTIONS` per option.

A row says the option's flag, how its text is read (`parse`, `choices`, or a
`switch` that takes no value), its help, the `--help` group it shows in, the
spec field it sets (named as a scenario file names it: `queue.max_length`,
`workload.client.prefetch`; harness.scenario_file) and the commands that take
it; `on` words its group or help differently for one command. harness.cli
builds every command's parser from the table (`add_options`) and the test spec
from what was parsed (`apply_options`): a given option sets its field, an
option not given leaves the base spec's (a scenario's, a scenario file's, a
replayed run's). The spec keeps its own defaults and validation: an option's
default is the spec's (a help's `{default}` shows it), never the table's, and
only options that set no spec field have one. The few settings that are more
than one field's value (`--nemesis` over a schedule, `--rabbitmq` taking
several lines for matrix and nightly, an unlimited consume rate) have a
function of their own (`apply`).

Adding an option is one row here; a setting a user may change that has no row
is still a scenario file's key (and `--vary`'s).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.rabbitmq import PARTITION_HANDLINGS
from clusters.registry import BACKENDS
from clusters.releases import METADATA_STORES, RELEASES
from harness.spec import MAX_NODES, SpecError, TestSpec
from harness.vary import VARY_HELP
from workloads.kinds import KINDS
from workloads.queue_spec import DELAYED_RETRY_TYPES, OVERFLOWS
from workloads.queue_workload import STAYS

# The commands that build a test spec from the options, and so take every spec option.
RUNS = frozenset({"run", "matrix", "nightly", "explore"})

# The `--help` groups, in the order they show; "" is the command's own options.
GROUPS: dict[str, str] = {
    "explore": "explore", "test": "test", "broker": "broker", "queue": "queue",
    "workload": "workload", "nemesis": "nemesis", "check": "check", "backend": "backend",
    "judgement": "judgement (default: the run's spec, else the defaults)", "Spark": "Spark",
}


def csv(text: str) -> tuple[str, ...]:
    """Takes "a,b, c". Returns ("a", "b", "c")."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _known(values: tuple[str, ...], text: str, known: Iterable[str],
           what: str) -> tuple[str, ...]:
    """Takes the values read from an option's text, the text, the known values and what they
    are ("client mode"). Returns the values. Raises ArgumentTypeError naming the unknown ones,
    or the text when it gave none."""
    unknown = [x for x in values if x not in known]
    if unknown or not values:
        said = ", ".join(unknown) or repr(text)
        raise argparse.ArgumentTypeError(f"unknown {what} {said}; known: {', '.join(known)}")
    return values


def releases(text: str) -> tuple[str, ...]:
    """Takes "3.10" or "3.10,4.0". Returns the release lines. Raises ArgumentTypeError for one
    the harness does not know."""
    return _known(csv(text), text, RELEASES, "RabbitMQ release")


def stay_modes(text: str) -> tuple[str, ...]:
    """Takes "none,both". Returns the client modes (`--stay` values), each once. Raises
    ArgumentTypeError for one that is not a mode."""
    return _known(tuple(dict.fromkeys(csv(text))), text, STAYS, "client mode")


UNLIMITED = "unlimited"  # --consume-rate unlimited: as fast as deliveries come


def rate(text: str) -> float | str:
    """Takes a rate's text. Returns it as a number, or UNLIMITED. Raises ArgumentTypeError."""
    if text == UNLIMITED:
        return UNLIMITED
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rate: {text!r}") from None


def on_off(text: str) -> bool:
    """Takes "on" or "off". Returns True or False. Raises ArgumentTypeError for anything else."""
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text == "on"


def expiry(text: str) -> float | str:
    """Takes a writeback expiry's text. Returns its seconds, or "off". Raises ArgumentTypeError."""
    if text == "off":
        return text
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds or off: {text!r}")
    return seconds


def ha_params(text: str) -> int | list[str]:
    """Takes "2" or "n1,n2". Returns a count or node names."""
    return int(text) if text.isdigit() else list(csv(text))


def absolute(text: str) -> str:
    """Takes a path. Returns it absolute (a run may change directory; test.json keeps it)."""
    return os.path.abspath(text)


def set_field(spec: Any, key: str, value: Any) -> Any:
    """Takes a spec (or a part of one), a dotted field name and a value. Returns the spec with
    that field set (not validated)."""
    name, _, rest = key.partition(".")
    if rest:
        value = set_field(getattr(spec, name), rest, value)
    return dataclasses.replace(spec, **{name: value})


def get_field(spec: Any, key: str) -> Any:
    """Takes a spec and a dotted field name. Returns that field's value."""
    for name in key.split("."):
        spec = getattr(spec, name)
    return spec


def _one_release(spec: TestSpec, lines: tuple[str, ...]) -> TestSpec:
    if len(lines) > 1:
        raise SpecError(f"a run tests one RabbitMQ release (--rabbitmq {','.join(lines)}); "
                        "matrix and nightly take several")
    return set_field(spec, "broker.rabbitmq", lines[0])


def _consume_rate(spec: TestSpec, value: float | str) -> TestSpec:
    return set_field(spec, "workload.consume_rate", None if value == UNLIMITED else value)


def _writeback(spec: TestSpec, value: float | str) -> TestSpec:
    return set_field(spec, "backend.writeback_expire_s", None if value == "off" else value)


def _faults(spec: TestSpec, entries: tuple[str, ...]) -> TestSpec:
    """Faults given over a schedule draw them from the seed instead (NemesisOptions.drawn)."""
    faults = () if entries in (("none",), ()) else entries
    return set_field(spec, "nemesis", dataclasses.replace(spec.nemesis.drawn(), faults=faults))


def _order(spec: TestSpec, order: str) -> TestSpec:
    nemesis = spec.nemesis.drawn() if order != "once" else spec.nemesis
    return set_field(spec, "nemesis", set_field(nemesis, "order", order))


@dataclass(frozen=True)
class On:
    """How one command shows an option otherwise: its group ("" the command's own options) or
    its help; None keeps the row's."""

    group: str | None = None
    help: str | None = None


NO_SWITCH = object()  # an option that takes a value


@dataclass(frozen=True)
class Option:
    """One option (the module's docstring): its flag, spec field, how its text is read, its
    help and group, and the commands that take it."""

    flag: str
    field: str | None = None
    help: str = ""
    group: str = ""
    commands: frozenset[str] = RUNS
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    switch: Any = NO_SWITCH  # a flag without a value: the value its field takes when given
    metavar: str | None = None
    dest: str | None = None
    default: Any = None  # for an option that sets no spec field only
    action: str | None = None  # "append": the option may be given several times
    apply: Callable[[TestSpec, Any], TestSpec] | None = None  # more than one field's value
    on: Mapping[str, On] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        """Returns the attribute argparse stores the option's value in."""
        return self.dest or self.flag.removeprefix("--").replace("-", "_")

    def group_on(self, command: str) -> str:
        """Returns the group the option shows in on a command."""
        said = self.on.get(command, On()).group
        return self.group if said is None else said

    def help_on(self, command: str, spec: TestSpec) -> str:
        """Returns the option's help on a command, `{default}` the spec's default."""
        text = self.on.get(command, On()).help or self.help
        if "{default}" in text and self.field is not None:
            text = text.replace("{default}", shown(get_field(spec, self.field)))
        return text

    def given(self, a: argparse.Namespace) -> Any:
        """Takes parsed options. Returns the value the option gives its field, None when it was
        not given."""
        value = getattr(a, self.name, None)
        if self.switch is NO_SWITCH or value is None:
            return value
        return self.switch if value else None


def shown(value: Any) -> str:
    """Returns a default as help shows it (60.0 as 60)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


_T, _B, _Q, _W, _N = "test", "broker", "queue", "workload", "nemesis"
_HA_PROMOTE = ("when-synced", "always")

OPTIONS: tuple[Option, ...] = (
    # -- the command's own ------------------------------------------------------------------------
    Option("--scenarios", parse=csv, commands=frozenset({"matrix", "nightly", "table"}),
           help="scenario names, comma-separated (default: every scenario)",
           on={"table": On(help="only these scenarios")}),
    Option("--repeat", parse=int, commands=frozenset({"run", "matrix"}),
           help="run N independently seeded times (seeds SEED, SEED+1, ...) and summarise: "
                "valid/invalid/unknown, detection rate, lost min/median/max",
           on={"matrix": On(help="runs of each scenario, round by round (default 1)")}),
    Option("--scenario-file", parse=Path, metavar="FILE",
           commands=frozenset({"run", "matrix", "explore"}),
           help="start from a scenario file (TOML: the spec, with faults drawn from its seed or "
                "an explicit schedule played once; every run directory holds scenario.toml, the "
                "run as played); other options override it, and --nemesis or --nemesis-order "
                "draw faults in place of its schedule",
           on={"matrix": On(help="the matrix's one test, from a scenario file (its seed is the "
                                 "series' first unless --seed)"),
               "explore": On(group="explore", help="the base test from a scenario file (its "
                                                   "faults are replaced)")}),
    Option("--vary", action="append", metavar="KEY=V1,V2", help=VARY_HELP,
           commands=frozenset({"matrix", "explore"}), on={"explore": On(group="explore")}),
    Option("--stay-variants", parse=stay_modes, metavar="MODES",
           commands=frozenset({"matrix", "nightly"}),
           help="run every partition and leader-kill scenario of the catalogue (chosen by its "
                "faults; or those --scenarios names) once per client mode of --stay listed, "
                "e.g. none,both (none: the scenario as it is): each staying mode a line of its "
                "own beside its scenario (\"partition (workload.stay=both)\"), predicted as "
                "its scenario and with no publish or consumer stuck after a heal; a mode a "
                "scenario cannot take is listed not applicable",
           on={"nightly": On(help="run the partition and leader-kill scenarios of the "
                                  "catalogue (or those --scenarios names, and their twins) once "
                                  "per client mode of --stay listed, e.g. none,both, within the "
                                  "budget: each staying mode a row, a line of the table and a "
                                  "JUnit testcase of its own (\"partition (workload.stay=both)\")"
                                  ", predicted as its scenario and with no publish or consumer "
                                  "stuck after a heal; a mode a scenario cannot take is listed "
                                  "not applicable")}),
    Option("--require-strength", switch=True, default=False,
           commands=frozenset({"run", "check"}),
           help="exit 2 for a valid but weak run (RabbitMQ noticed none of its faults, or "
                "nothing was at risk when they began) instead of 0: a weak run is never a pass"),
    # -- test ------------------------------------------------------------------------------------
    Option("--scenario", group=_T, help="start from a named scenario (see `scenarios`)"),
    Option("--name", "name", group=_T, help="test name (store/<name>/...)"),
    Option("--nodes", "nodes", group=_T, parse=int,
           help=f"broker nodes (1-{MAX_NODES}, default {{default}})"),
    Option("--time-limit", "time_limit_s", group=_T, parse=float,
           help="seconds of main phase (default {default})"),
    Option("--seed", "seed", group=_T, parse=int,
           help="random seed (default: drawn and recorded)"),
    Option("--store", "store", group=_T, commands=RUNS | {"shrink"},
           help="store directory (default {default}/)",
           on={"shrink": On(group="", help="store root (default: the finding's)")}),
    Option("--recovery-timeout", "recovery_timeout_s", group=_T, parse=float,
           help="seconds to wait for health after heal (default {default})"),
    Option("--no-progress", group=_T, switch=True, default=False, commands=RUNS | {"shrink"},
           help="no live progress on stderr (a line redrawn on a terminal, else a line every "
                "10 s)",
           on={"shrink": On(group="", help="no live progress on stderr")}),
    # -- broker ----------------------------------------------------------------------------------
    Option("--partition-handling", "broker.partition_handling", group=_B,
           choices=PARTITION_HANDLINGS,
           help="cluster_partition_handling (default pause_minority, RabbitMQ's recommendation "
                "for 3+ nodes; RabbitMQ's own default is ignore); refused on 4.3, which has "
                "none"),
    Option("--net-ticktime", "broker.net_ticktime", group=_B, parse=int,
           help="seconds (default {default}, so partitions are noticed in 7.5-12.5 s and runs "
                "stay short; RabbitMQ's own is 60)"),
    Option("--rabbitmq", "broker.rabbitmq", group=_B, parse=releases, apply=_one_release,
           metavar="|".join(RELEASES),
           help="the RabbitMQ release line (default {default}, this host's Debian package; "
                "4.0 runs Debian 13's 4.0.5 on Erlang 27 and 4.3 Debian unstable's 4.3.6 on "
                "Erlang 29, each from a root filesystem built on first use, about a minute); "
                "matrix and nightly take several, 3.10,4.0,4.3, and put each scenario's "
                "verdicts side by side"),
    Option("--metadata-store", "broker.metadata_store", group=_B, choices=METADATA_STORES,
           help="the line's own by default (mnesia; khepri on 4.3, its only store); 4.0 takes "
                "khepri, the Raft metadata store (enabled through its feature flag once the "
                "cluster has formed; cluster_partition_handling does not apply to it)"),
    Option("--permit-transient-queues", "broker.permit_transient_queues", group=_B,
           switch=True,
           help="4.3: permit the deprecated feature transient_nonexcl_queues on every node, so "
                "that a --transient-queue can be declared (4.3 refuses it otherwise)"),
    # -- queue -----------------------------------------------------------------------------------
    Option("--queue", "queue.name", group=_Q, dest="queue_name",
           help="queue name (default {default})"),
    Option("--queue-type", "queue.type", group=_Q, choices=tuple(KINDS),
           help="; ".join(f"{k.name}: {k.summary}" for k in KINDS.values())),
    Option("--transient-queue", "queue.durable", group=_Q, switch=False,
           help="declare the queue non-durable (classic only)"),
    Option("--quorum-initial-group-size", "queue.quorum_initial_group_size", group=_Q,
           parse=int, help="replicas of a quorum queue or stream"),
    Option("--delivery-limit", "queue.delivery_limit", group=_Q, parse=int, metavar="N",
           help="quorum queues: deliveries of a message before the queue drops it "
                "(x-delivery-limit; default: RabbitMQ's, none on 3.10, 20 on 4.0); the harness "
                "dead-letters what it drops and reads it back, so it is counted as dropped by "
                "design, not lost"),
    Option("--ha-mode", "queue.ha_mode", group=_Q, choices=("all", "exactly", "nodes"),
           help="mirrored queues: the policy's ha-mode (default {default})"),
    Option("--ha-params", "queue.ha_params", group=_Q, parse=ha_params,
           help="a count, or node names n1,n2"),
    Option("--ha-sync-mode", "queue.ha_sync_mode", group=_Q, choices=("automatic", "manual"),
           help="mirrored queues: the policy's ha-sync-mode (default {default}, RabbitMQ's)"),
    Option("--ha-promote-on-shutdown", "queue.ha_promote_on_shutdown", group=_Q,
           choices=_HA_PROMOTE),
    Option("--ha-promote-on-failure", "queue.ha_promote_on_failure", group=_Q,
           choices=_HA_PROMOTE),
    Option("--queue-master-locator", "queue.queue_master_locator", group=_Q,
           choices=("min-masters", "client-local", "random")),
    Option("--single-active-consumer", "queue.single_active_consumer", group=_Q, switch=True),
    Option("--max-length", "queue.max_length", group=_Q, parse=int,
           help="the queue's length limit in messages (x-max-length); a backlog that grows past "
                "it meets the overflow behaviour"),
    Option("--overflow", "queue.overflow", group=_Q, choices=OVERFLOWS,
           help="what the queue does at its max length: drop-head discards the oldest "
                "(RabbitMQ's default; the harness dead-letters them and counts them as dropped "
                "by design), reject-publish nacks new publishes"),
    Option("--dead-letter-exchange", "queue.dead_letter_exchange", group=_Q, metavar="NAME",
           help="the queue's own dead-letter exchange (x-dead-letter-exchange); by default, a "
                "queue that drops messages by design (drop-head, a delivery limit) dead-letters "
                "to the harness's own, which the drain reads back. With yours the harness "
                "cannot account for dropped messages: those it did not deliver are not proven "
                "lost (the verdict is then unknown)"),
    Option("--delayed-retry-type", "queue.delayed_retry_type", group=_Q,
           choices=DELAYED_RETRY_TYPES,
           help="4.3 quorum queues: which returned messages wait before they are ready again "
                "(x-delayed-retry-type); checked in results.json's delayed_retry section"),
    Option("--delayed-retry-min", "queue.delayed_retry_min_ms", group=_Q, parse=int,
           metavar="MS", help="4.3 quorum queues: x-delayed-retry-min, the delay per delivery "
                              "count (ms)"),
    Option("--delayed-retry-max", "queue.delayed_retry_max_ms", group=_Q, parse=int,
           metavar="MS", help="4.3 quorum queues: x-delayed-retry-max, the longest delay (ms)"),
    Option("--consumer-disconnected-timeout", "queue.consumer_disconnected_timeout_ms", group=_Q,
           parse=int, metavar="MS",
           help="4.3 quorum queues: x-consumer-disconnected-timeout, how long a consumer whose "
                "node became unreachable keeps its messages before they are returned (the "
                "broker's default 60000; 0: at once, as before 4.3)"),
    Option("--max-priority", "queue.max_priority", group=_Q, parse=int, metavar="N",
           help="declare the queue with x-max-priority N (1-255), whatever its kind, recorded "
                "in test.json: a classic queue then orders by message priority up to N (not "
                "judged: --priorities stays quorum-only); RabbitMQ documents it for classic "
                "queues, and a quorum queue is sent it as given so that the broker's answer is "
                "what is recorded (a refusal ends the run with exit 2 and the broker's reply)"),
    # -- workload --------------------------------------------------------------------------------
    Option("--publishers", "workload.publishers", group=_W, parse=int,
           help="publisher processes (default {default})"),
    Option("--consumers", "workload.consumers", group=_W, parse=int,
           help="consumer processes (default {default}; 0: the main phase only publishes)"),
    Option("--rate", "workload.rate", group=_W, parse=float,
           help="publishes per second, all publishers together (default {default})"),
    Option("--consume-rate", "workload.consume_rate", group=_W, parse=rate, apply=_consume_rate,
           help="acks per second, all consumers together (default {default}, below the publish "
                "rate, so the queue keeps a backlog); 'unlimited' for as fast as possible"),
    Option("--pause-consumers-in-faults", "workload.pause_consumers_in_faults", group=_W,
           switch=True,
           help="consumers stop while a fault is active (the backlog grows through it)"),
    Option("--backlog", "workload.backlog", group=_W, parse=int,
           help="messages published and confirmed before the main phase, so the first fault "
                "already finds them queued (default {default})"),
    Option("--priorities", "workload.priorities", group=_W, metavar="DIST",
           help="each message's priority, drawn from VALUE[:WEIGHT],... (VALUE 0-255, or none "
                "for no priority property; e.g. none:2,1,9); default: no priorities. Quorum "
                "queues only: 4.0 serves two levels at a ratio, 4.3 32 levels (0-31) strictly, "
                "which the priority check judges (with --prefetch 1); 3.10 has none (refused)"),
    Option("--publish-timeout", "workload.client.publish_timeout_s", group=_W, parse=float,
           help="seconds to wait for a confirm (default {default})"),
    Option("--stay", "workload.stay", group=_W, choices=STAYS,
           help="clients that stay across faults and heals, as long-lived applications do "
                "(default {default}: every client a Jepsen process, retired when a confirm does "
                "not come within --publish-timeout): staying publishers keep their channel and "
                "window and wait up to --confirm-deadline for each confirm, staying consumers "
                "keep their subscription and unacked deliveries; the liveness section judges "
                "each publish and consumer across a heal settled or stuck"),
    Option("--confirm-deadline", "workload.confirm_deadline_s", group=_W, parse=float,
           metavar="S",
           help="seconds a staying publisher waits for a confirm (default {default}; at least "
                "the liveness bound, 42.5 s at the defaults)"),
    Option("--window", "workload.client.window", group=_W, parse=int,
           help="unconfirmed publishes each publisher keeps in flight (default {default})"),
    Option("--prefetch", "workload.client.prefetch", group=_W, parse=int,
           help="unacked deliveries a consumer may hold (default {default})"),
    Option("--transient-messages", "workload.client.persistent", group=_W, switch=False,
           help="publish with delivery mode 1"),
    Option("--no-confirms", "workload.client.confirms", group=_W, switch=False,
           help="publish without confirms (every publish is then info)"),
    Option("--no-mandatory", "workload.client.mandatory", group=_W, switch=False,
           help="publish without the mandatory flag"),
    Option("--consumer-crash-after", "workload.client.crash_after", group=_W, parse=int,
           help="consumers close their channel unacked every N deliveries"),
    Option("--reject-share", "workload.client.reject_share", group=_W, parse=float,
           help="share of main-phase deliveries returned with basic.reject requeue=true, "
                "recorded as f \"reject\" (default {default})"),
    Option("--nack-share", "workload.client.nack_share", group=_W, parse=float,
           help="share of main-phase deliveries returned with basic.nack requeue=true, "
                "recorded as f \"nack\" (default {default})"),
    Option("--hold-share", "workload.client.hold_share", group=_W, parse=float,
           help="share of main-phase deliveries held --hold-s seconds before their ack, past a "
                "consumer timeout when that is shorter (default {default})"),
    Option("--hold-s", "workload.client.hold_s", group=_W, parse=float,
           help="seconds a held delivery is held (default {default})"),
    Option("--consumer-timeout-ms", "workload.client.consumer_timeout_ms", group=_W, parse=int,
           metavar="MS",
           help="main-phase consumers' x-consumer-timeout (ms, at least 1000; not on 3.10)"),
    Option("--consumer-cancel-notify", "workload.client.consumer_cancel_notify", group=_W,
           parse=on_off, metavar="on|off",
           help="whether clients advertise the consumer_cancel_notify capability (default "
                "on): off, RabbitMQ ends a timed-out consumer by closing its channel with 406 "
                "PRECONDITION_FAILED instead of sending basic.cancel; the consumer_timeout "
                "section accounts for either"),
    Option("--metadata-probe-interval", "workload.metadata_probe_interval_s", group=_W,
           parse=float,
           help="seconds between two rounds of each node's metadata probe: a new connection, "
                "then declare, bind and delete of a durable exchange, each op recorded and judged "
                "in results.json's metadata section (default {default}: no probe)"),
    Option("--metadata-probe-timeout", "workload.metadata_probe_timeout_s", group=_W,
           parse=float,
           help="seconds a metadata probe's op may take before it is recorded unknown "
                "(default {default})"),
    Option("--placement-interval", "placement_interval_s", group=_W, parse=float,
           help="seconds between samples of the queue's leader/members (0: off)"),
    # -- nemesis ---------------------------------------------------------------------------------
    Option("--nemesis", "nemesis.faults", group=_N, parse=csv, metavar="FAULTS", apply=_faults,
           help="fault entries NAME[@TARGETS][:KEY=VALUE]..., comma-separated, or 'none'. Each "
                "may name its own targets after @ (kill@leader, stop@follower, pause@n1+n3) and "
                "its own options after colons: duration and interval in seconds, or one of the "
                "fault's own settings (kill@leader:duration=10:interval=20, "
                "packet-loss@n2:packet_loss=0.5); what an entry does not set comes from the "
                "options below"),
    Option("--nemesis-order", "nemesis.order", group=_N, choices=("random", "cycle"),
           apply=_order,
           help="draw each fault at random (default) or play them in the order given"),
    Option("--nemesis-interval", "nemesis.interval_s", group=_N, parse=float,
           help="healthy seconds before each fault (default {default}, or the scenario's), "
                "unless its entry says"),
    Option("--nemesis-duration", "nemesis.duration_s", group=_N, parse=float,
           help="seconds each fault lasts, unless its entry says (default: the scenario's, else "
                "2 x net_ticktime, 20 s at the default 10 s, so that RabbitMQ notices it; a "
                "shorter partition or pause is played with a warning, and the run may come out "
                "valid but weak)"),
    Option("--nemesis-targets", "nemesis.targets", group=_N,
           help="one, random, minority, majority, all, leader, follower, followers, or n1,n2"),
    Option("--packet-loss", "nemesis.packet_loss", group=_N, parse=float,
           help="share of packets dropped (packet-loss; default {default})"),
    Option("--packet-scope", "nemesis.packet_scope", group=_N, choices=("peers", "all"),
           help="packet loss on cluster traffic only, or on all traffic"),
    Option("--bandwidth-kbit", "nemesis.bandwidth_kbit", group=_N, parse=int,
           help="rate limit of the bandwidth fault (default {default})"),
    Option("--delay-ms", "nemesis.delay_ms", group=_N, parse=float,
           help="delay of netem-delay (default {default})"),
    # -- check -----------------------------------------------------------------------------------
    Option("--spark-master", "check.spark_master", group="check", commands=RUNS | {"check"},
           help="Spark master URL (default local[*])",
           on={"check": On(group="", help="Spark master URL (default: the run's, else "
                                          "local[*])")}),
    Option("--strict-order", "check.strict_order", group="check", switch=True,
           commands=RUNS | {"check"}, on={"check": On(group="judgement")},
           help="FIFO including redeliveries (single active consumer, prefetch 1)"),
    Option("--unflagged-redeliveries-invalid", "check.unflagged_redeliveries_invalid",
           group="check", switch=True, commands=RUNS | {"check"},
           on={"check": On(group="judgement")},
           help="a message delivered again without the redelivered flag, its earlier delivery "
                "acked or not (unflagged_redelivered), makes the queue invalid; reported either "
                "way"),
    Option("--flagged-duplicates-invalid", "check.flagged_duplicates_invalid", switch=True,
           group="judgement", commands=frozenset({"check"}),
           help="duplicates flagged redelivered also make the queue invalid"),
    Option("--unflagged-duplicates-valid", "check.unflagged_duplicates_invalid", switch=False,
           group="judgement", commands=frozenset({"check"}),
           help="duplicates without the redelivered flag do not make the queue invalid"),
    Option("--no-require-drain", "check.require_drain", switch=False, group="judgement",
           commands=frozenset({"check"}),
           help="call messages lost even without a completed drain"),
    Option("--parquet", group="Spark", parse=Path, metavar="DIR", commands=frozenset({"check"}),
           help="convert the JSONL history to Parquet in DIR, then check that (check DIR itself "
                "later, without parsing JSON again)"),
    Option("--work-dir", "check.work_dir", group="Spark", parse=Path,
           commands=frozenset({"check"}), help="scratch directory for Spark's tables"),
    Option("--driver-memory", "check.driver_memory", group="Spark",
           commands=frozenset({"check"}),
           help="the Spark driver's memory (default {default})"),
    # -- backend ---------------------------------------------------------------------------------
    Option("--backend", "backend.kind", group="backend", choices=tuple(BACKENDS),
           help="where the brokers run: local network namespaces (default), SSH hosts, or "
                "Docker containers"),
    Option("--inventory", "backend.inventory", group="backend", parse=absolute,
           help="ssh: the inventory file (TOML; see README, Backends)"),
    Option("--accept-new-host-keys", "backend.accept_new_host_keys", group="backend",
           switch=True,
           help="ssh: trust host keys known_hosts lacks and record them (a changed key is still "
                "refused)"),
    Option("--install-rabbitmq", "backend.install_rabbitmq", group="backend", switch=True,
           help="ssh: install Debian's rabbitmq-server on hosts that lack it"),
    Option("--docker-image", "backend.docker_image", group="backend",
           help="docker: a local image (never pulled; default {default}, built by "
                "scripts/build-docker-image.sh)"),
    Option("--docker-network", "backend.docker_network", group="backend",
           help="docker: the network the containers join (default {default})"),
    Option("--docker-subnet", "backend.docker_subnet", group="backend",
           help="docker: the network's subnet (default {default})"),
    Option("--unsynced-fs", "backend.unsynced_fs", group="backend", switch=True,
           help="local: each node's data directory on a layer that forgets unsynced writes "
                "(lazyfs; a power-loss fault turns it on), e.g. for a baseline on the layer"),
    Option("--writeback-expire", "backend.writeback_expire_s", group="backend", parse=expiry,
           apply=_writeback, metavar="S|off",
           help="local, on that layer: unsynced data is written back and durable about S s "
                "after it was written (Linux's dirty_expire_centisecs, its 5 s flusher and "
                "ext4's 5 s commit); off: never, the worst case (default {default})"),
    Option("--young-cluster", "backend.settle_layers", group="backend", switch=False,
           help="local, on that layer: do not settle the layers once the cluster is set up (by "
                "default every node's layer is synced then, as if the cluster had run long "
                "enough for the kernel's writeback), so that the faults find the files RabbitMQ "
                "wrote at setup without fsync still unsynced; refused without the layer"),
)


def taken_by(command: str) -> list[Option]:
    """Takes a command's name. Returns the options it takes, in the table's order."""
    return [o for o in OPTIONS if command in o.commands]


def add_options(p: argparse.ArgumentParser, command: str,
                groups: Mapping[str, Any] | None = None) -> None:
    """Takes a command's parser, its name and any groups it made itself (by GROUPS key). Adds
    every option the command takes, in its group (GROUPS' order)."""
    options = taken_by(command)
    made: dict[str, Any] = {"": p, **(groups or {})}
    for key, title in GROUPS.items():
        if key not in made and any(o.group_on(command) == key for o in options):
            made[key] = p.add_argument_group(title)
    defaults = TestSpec()
    for o in options:
        made[o.group_on(command)].add_argument(o.flag, **_argument(o, command, defaults))


def _argument(o: Option, command: str, defaults: TestSpec) -> dict[str, Any]:
    """Returns add_argument's keywords for an option on a command: unset (None) for an option
    that sets a spec field, so that what is not given keeps the base spec's."""
    kw: dict[str, Any] = {"help": o.help_on(command, defaults) or None,
                          "default": None if o.field else o.default}
    if o.switch is not NO_SWITCH:
        kw["action"] = "store_true"
        return kw
    extra = {"type": o.parse, "choices": o.choices, "metavar": o.metavar, "dest": o.dest,
             "action": o.action}
    kw.update({k: v for k, v in extra.items() if v is not None})
    return kw


def apply_options(spec: TestSpec, a: argparse.Namespace,
                  options: Iterable[Option] = OPTIONS) -> TestSpec:
    """Takes a base spec and parsed options. Returns the spec with each option given setting
    its field, in the table's order (not validated). Raises SpecError (`--rabbitmq` lines)."""
    for o in options:
        value = o.given(a)
        if o.field is None or value is None:
            continue
        spec = o.apply(spec, value) if o.apply else set_field(spec, o.field, value)
    return spec


def flags_by_name() -> dict[str, str]:
    """Returns each spec field's own name (duration_s, the last part of nemesis.duration_s) and
    the option that sets it, for the names only one option's field has."""
    named: dict[str, list[str]] = {}
    for o in OPTIONS:
        if o.field is not None:
            named.setdefault(o.field.rsplit(".", 1)[-1], []).append(o.flag)
    return {name: flags[0] for name, flags in named.items() if len(flags) == 1}
