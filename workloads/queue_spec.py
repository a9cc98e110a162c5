"""The queue under test, as pure data: `QueueSpec`, and what its kind makes of it.

`QueueSpec` says which kind of queue the workload uses (quorum, classic
mirrored via a policy, classic unmirrored, or a stream: `type`, a name in
workloads.kinds.KINDS) and with which settings. Everything that differs by
kind lives in that kind's module; the functions here are the spec's view of
it: `queue_arguments` and `ha_policy` (what the broker is given) and
`reads_whole_log` (every consumer sees every message: a stream).

Some queues drop messages by design: at a max length with overflow drop-head
the oldest go, and a quorum queue drops a message returned more often than
its delivery limit (set by `delivery_limit`, or RabbitMQ's own default from
4.0 on, which the release table says: `clusters.releases.default_delivery_limit`).
`dead_lettering` says when a queue does, and where its dead letters go: to an exchange and queue of the harness's own
(`dead_letter_names`), which the drain reads back, so that what the broker
dropped by design is told apart from loss; or to the user's own exchange
(`dead_letter_exchange`), which the harness does not read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from clusters.releases import default_delivery_limit
from workloads.kinds import KINDS, QueueConfigError, kind_of

# What a queue at its max length does with a new message (RabbitMQ's x-overflow; both kinds of
# queue take these two; drop-head is the broker's default).
OVERFLOWS: tuple[str, ...] = ("drop-head", "reject-publish")
# Which returned messages a 4.3 quorum queue delays (x-delayed-retry-type): none, every one,
# those a consumer failed (rejected, or lost with its consumer), those returned otherwise.
DELAYED_RETRY_TYPES: tuple[str, ...] = ("disabled", "all", "failed", "returned")
# What the harness appends to the queue's name for its own dead-letter exchange and queue.
DEAD_LETTER_SUFFIXES: tuple[str, str] = (".harness-dlx", ".harness-dlq")
__all__ = ["DELAYED_RETRY_TYPES", "OVERFLOWS", "DeadLettering", "QueueConfigError", "QueueSpec",
           "dead_letter_names", "dead_letter_queue_spec", "dead_lettering", "ha_policy",
           "queue_arguments", "reads_whole_log"]


@dataclass(frozen=True)
class QueueSpec:
    """The queue the workload publishes to and consumes from."""

    name: str = "jepsen.queue"
    type: str = "quorum"  # a name in workloads.kinds.KINDS
    durable: bool = True
    # quorum queues (and streams: their initial cluster size)
    quorum_initial_group_size: int | None = None
    delivery_limit: int | None = None
    # classic mirrored queues (applied by policy); where unset, RabbitMQ's own defaults (manual
    # synchronisation: a new mirror starts empty and stays so until the old messages are gone)
    ha_mode: str = "all"
    ha_params: int | list[str] | None = None
    ha_sync_mode: str = "manual"
    ha_promote_on_shutdown: str | None = None
    ha_promote_on_failure: str | None = None
    queue_master_locator: str | None = None
    single_active_consumer: bool = False
    # A length limit (x-max-length, messages) and what the broker does at it (x-overflow):
    # drop-head discards the oldest (dead-lettered: dropped by design), reject-publish nacks.
    max_length: int | None = None
    overflow: str | None = None
    # The user's own dead-letter exchange (x-dead-letter-exchange). None: when the queue drops
    # messages by design, the harness dead-letters them to an exchange and queue of its own and
    # reads them back; with the user's, it cannot account for them (`dead_lettering`).
    dead_letter_exchange: str | None = None
    # Quorum queues, RabbitMQ 4.3: delayed retry (x-delayed-retry-type, -min, -max; ms). A
    # returned message is ready again only after min(min x its delivery count, max).
    delayed_retry_type: str | None = None
    delayed_retry_min_ms: int | None = None
    delayed_retry_max_ms: int | None = None
    # Quorum queues, RabbitMQ 4.3: how long a consumer whose node became unreachable keeps its
    # messages before they are returned (x-consumer-disconnected-timeout, ms; the broker's
    # default 60 s). 0 returns them at once, as every line before 4.3 did.
    consumer_disconnected_timeout_ms: int | None = None
    # The queue's own consumer timeout (x-consumer-timeout, ms), which RabbitMQ 4.0's channel
    # reads (rabbit_channel:get_queue_consumer_timeout, v4.0.5) where 4.3 takes the consumer's
    # argument: set by harness.spec.TestSpec.resolved from --consumer-timeout-ms on such a line.
    consumer_timeout_ms: int | None = None
    # x-max-priority (1-255), sent to the queue as given whatever its kind: a classic queue
    # orders by message priority up to it; a quorum queue's broker answers what it does with it
    # (RabbitMQ's documentation describes it for classic queues only). The priority check does
    # not use it (harness.spec refuses --priorities on a classic queue).
    max_priority: int | None = None

    def validate(self, node_count: int) -> None:
        """Takes the cluster size. Raises QueueConfigError for an impossible setting."""
        kind = kind_of(self)
        if not self.name or len(self.name) > 255:
            raise QueueConfigError("queue name must be 1-255 characters")
        if self.quorum_initial_group_size is not None and not (
            1 <= self.quorum_initial_group_size <= node_count
        ):
            raise QueueConfigError(
                f"quorum initial group size must be 1..{node_count}, "
                f"got {self.quorum_initial_group_size}"
            )
        if self.delivery_limit is not None and self.delivery_limit < 1:
            raise QueueConfigError(
                f"--delivery-limit must be > 0 deliveries, got {self.delivery_limit}")
        if self.delivery_limit is not None and not kind.takes_delivery_limit:
            raise QueueConfigError(f"--delivery-limit applies to quorum queues, not {kind.name}")
        if self.dead_letter_exchange is not None and not (
                0 < len(self.dead_letter_exchange) <= 255):
            raise QueueConfigError("--dead-letter-exchange must be 1-255 characters")
        if self.max_length is not None and self.max_length < 1:
            raise QueueConfigError(f"max length must be >= 1 message, got {self.max_length}")
        if self.overflow is not None:
            if self.overflow not in OVERFLOWS:
                raise QueueConfigError(
                    f"unknown overflow {self.overflow!r}; known: {', '.join(OVERFLOWS)}")
            if self.max_length is None:
                raise QueueConfigError("an overflow behaviour needs a max length")
        self._check_delayed_retry(kind.takes_delayed_retry, kind.name)
        self._check_max_priority()
        self._check_timeouts(kind.takes_delayed_retry, kind.name)
        kind.validate(self, node_count)

    def _check_timeouts(self, quorum_4_3: bool, kind: str) -> None:
        """Takes whether the queue's kind takes 4.3's quorum-queue arguments, and its name.
        Raises QueueConfigError for a consumer timeout not above 0, or a disconnected timeout
        below 0 or on another kind, naming the option."""
        if self.consumer_timeout_ms is not None and (
                not isinstance(self.consumer_timeout_ms, int) or self.consumer_timeout_ms < 1):
            raise QueueConfigError(
                f"the queue's consumer timeout must be > 0 ms, got {self.consumer_timeout_ms}")
        ms = self.consumer_disconnected_timeout_ms
        if ms is not None and not quorum_4_3:
            raise QueueConfigError(
                f"--consumer-disconnected-timeout applies to quorum queues, not {kind}")
        if ms is not None and (not isinstance(ms, int) or ms < 0):
            raise QueueConfigError(f"--consumer-disconnected-timeout must be >= 0 ms, got {ms}")

    def _check_delayed_retry(self, takes: bool, kind: str) -> None:
        """Takes whether the queue's kind has delayed retry, and its name. Raises
        QueueConfigError for an unknown type, a delay below 0, a min above the max, a delay
        without a type, or any of them on a kind without delayed retry, naming the option."""
        given = {"--delayed-retry-type": self.delayed_retry_type,
                 "--delayed-retry-min": self.delayed_retry_min_ms,
                 "--delayed-retry-max": self.delayed_retry_max_ms}
        for flag, value in given.items():
            if value is not None and not takes:
                raise QueueConfigError(f"{flag} applies to quorum queues, not {kind}")
        if self.delayed_retry_type is not None and \
                self.delayed_retry_type not in DELAYED_RETRY_TYPES:
            raise QueueConfigError(f"unknown --delayed-retry-type {self.delayed_retry_type!r}; "
                                   f"known: {', '.join(DELAYED_RETRY_TYPES)}")
        for flag in ("--delayed-retry-min", "--delayed-retry-max"):
            ms = given[flag]
            if ms is not None and (not isinstance(ms, int) or ms < 0):
                raise QueueConfigError(f"{flag} must be >= 0 ms, got {ms}")
            if ms is not None and self.delayed_retry_type is None:
                raise QueueConfigError(f"{flag} needs --delayed-retry-type")
        lo, hi = self.delayed_retry_min_ms, self.delayed_retry_max_ms
        if lo is not None and hi is not None and lo > hi:
            raise QueueConfigError(
                f"--delayed-retry-min ({lo} ms) must not exceed --delayed-retry-max ({hi} ms)")

    def _check_max_priority(self) -> None:
        """Raises QueueConfigError naming --max-priority when it is set to anything but an
        integer 1..255 (the range AMQP's priority octet and RabbitMQ's x-max-priority take)."""
        value = self.max_priority
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 255:
            raise QueueConfigError(f"--max-priority must be an integer 1..255, got {value!r}")

    def delayed_retry_set(self) -> bool:
        """Returns whether the spec sets any delayed-retry argument."""
        return any(v is not None for v in (self.delayed_retry_type, self.delayed_retry_min_ms,
                                            self.delayed_retry_max_ms))


def settings_that_matter(spec: QueueSpec) -> dict[str, Any]:
    """Takes a QueueSpec. Returns its fields as data without those only other kinds read (a
    quorum queue has no ha-sync-mode), to tell whether two specs test the same."""
    d = dataclasses.asdict(spec)
    mine = set(kind_of(spec).own_fields)
    for kind in KINDS.values():
        for name in set(kind.own_fields) - mine:
            d.pop(name, None)
    return d


def reads_whole_log(spec: QueueSpec) -> bool:
    """Returns whether every consumer of the queue reads every message (a stream)."""
    return kind_of(spec).reads_whole_log


def queue_arguments(spec: QueueSpec, dead_letters: DeadLettering | None = None) -> dict[str, Any]:
    """Takes a QueueSpec and where the queue dead-letters (`dead_lettering`; None: nowhere).
    Returns the x-arguments of its queue.declare."""
    args = kind_of(spec).arguments(spec)
    if dead_letters is not None:
        args["x-dead-letter-exchange"] = dead_letters.exchange
    return args


def ha_policy(spec: QueueSpec, erlang_names: dict[str, str]) -> dict[str, Any] | None:
    """Takes a QueueSpec and a map of short to Erlang node names. Returns the definition of the
    policy its kind needs (a mirroring policy for a mirrored queue), else None."""
    return kind_of(spec).policy(spec, erlang_names)


def dead_letter_names(queue: str) -> tuple[str, str]:
    """Takes the queue's name. Returns the names of the harness's own dead-letter exchange and
    queue for it ("<queue>.harness-dlx", "<queue>.harness-dlq")."""
    return queue + DEAD_LETTER_SUFFIXES[0], queue + DEAD_LETTER_SUFFIXES[1]


@dataclass(frozen=True)
class DeadLettering:
    """Where a queue's dead letters go, and the limits that make it drop messages by design.

    `queue` is the harness's own dead-letter queue, which the drain reads; None when the
    exchange is the user's, whose dead letters the harness cannot account for. `limits` are
    phrases ("max length 500 (drop-head)", "delivery limit 20 (RabbitMQ 4.0's default)").
    """

    exchange: str
    queue: str | None
    limits: tuple[str, ...] = ()

    def observation(self, queue: str) -> dict[str, Any]:
        """Takes the queue's name. Returns the value of the harness's `dead-lettering`
        observation: queue, exchange, dead_letter_queue, by ("harness" or "user"), limits."""
        return {"queue": queue, "exchange": self.exchange, "dead_letter_queue": self.queue,
                "by": "harness" if self.queue is not None else "user",
                "limits": list(self.limits)}


def dead_lettering(spec: QueueSpec, line: str | None = None) -> DeadLettering | None:
    """Takes a QueueSpec and the broker's release line (None: unknown, no default limit).
    Returns where the queue dead-letters: the user's exchange when the spec names one; else,
    when the queue drops messages by design (a max length with overflow drop-head, or a
    delivery limit, its own or the release line's default for a kind that takes one), the
    harness's own exchange and queue; else None."""
    limits = []
    if spec.max_length is not None and spec.overflow in (None, "drop-head"):
        limits.append(f"max length {spec.max_length} (drop-head)")
    if kind_of(spec).takes_delivery_limit:
        default = default_delivery_limit(line) if line is not None else None
        if spec.delivery_limit is not None:
            limits.append(f"delivery limit {spec.delivery_limit}")
        elif default is not None:
            limits.append(f"delivery limit {default} (RabbitMQ {line}'s default)")
    if spec.dead_letter_exchange is not None:
        return DeadLettering(spec.dead_letter_exchange, None, tuple(limits))
    if not limits:
        return None
    exchange, queue = dead_letter_names(spec.name)
    return DeadLettering(exchange, queue, tuple(limits))


def dead_letter_queue_spec(spec: QueueSpec) -> QueueSpec:
    """Takes the queue's spec. Returns the spec of the harness's dead-letter queue for it: the
    same kind (a quorum queue's dead letters live in a quorum queue, replicated as it is; a
    mirrored queue's in a queue mirrored alike), durable, without limits, single active consumer
    or dead-letter exchange of its own, nor a max priority."""
    return dataclasses.replace(
        spec, name=dead_letter_names(spec.name)[1], durable=True, delivery_limit=None,
        max_length=None, overflow=None, single_active_consumer=False,
        dead_letter_exchange=None, delayed_retry_type=None, delayed_retry_min_ms=None,
        delayed_retry_max_ms=None, consumer_disconnected_timeout_ms=None, consumer_timeout_ms=None,
        max_priority=None)
