"""Named scenarios: complete test specs, each with a prediction that a run can fail.

`scenario(name)` returns the spec; the CLI's `--scenario NAME` starts from it
and further options override it; `make test-<name>` runs one. Every scenario
predicts (`Scenario.expect`, a harness.matrix.Expectation) either a valid run,
where RabbitMQ's documentation promises safety, or a named anomaly ("lost"),
where the documentation says the configuration loses confirmed messages, and
the share of repeated runs that must show it. Each unsafe scenario has a safe
twin (`Scenario.twin`): the same faults under the same seeded schedule, with
the documented safe configuration, predicted valid.

The workload keeps a standing backlog in the queue by default (consumers
slower than publishers), so a fault always has thousands of messages to lose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from checkers.options import CheckOptions
from clusters.rabbitmq import BrokerConfig
from clusters.releases import RELEASES
from harness.matrix import Expectation, loss
from harness.spec import SpecError, TestSpec
from history.faults import KILL, PARTITION
from nemesis import NemesisOptions
from nemesis.faults import fault_info
from workloads.clients import ClientOptions
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import WorkloadOptions

VALID = Expectation()


@dataclass(frozen=True)
class Scenario:
    """A spec, what the documentation says should happen to it, and its safe twin's name."""

    spec: TestSpec
    expect_text: str
    expect: Expectation = VALID
    twin: str | None = None


def _faults(*faults: str, interval: float = 10, duration: float | None = None,
            targets: str = "one", **extra: object) -> NemesisOptions:
    """Fault options; a duration left None lasts 2 x net_ticktime (harness.spec.resolved), long
    enough for RabbitMQ to notice a partition or a pause whatever net_ticktime is. Kills, stops
    and restarts are noticed at once and keep durations of their own."""
    return NemesisOptions(faults=faults, interval_s=interval, duration_s=duration,
                          targets=targets, **extra)  # type: ignore[arg-type]


MIRRORED_ALL = QueueSpec(type="mirrored", ha_mode="all", ha_sync_mode="automatic")
CLASSIC = QueueSpec(type="classic")
# Restart a mirror (it rejoins empty), then kill the master while the old backlog is queued.
UNSYNCED_FAULTS = _faults("stop@follower", "kill@leader", order="cycle", interval=15,
                          duration=15)
# Restart every mirror at once (all rejoin empty), then kill the master.
REJOIN_FAULTS = _faults("stop@followers", "kill@leader", order="cycle", interval=15, duration=15)
SLOW_CONSUMERS = WorkloadOptions(consume_rate=20.0)
# Publishers that wait out partition detection (net_ticktime 10 s: up to ~15 s) for a confirm stay
# on their node: on an isolated master they go on publishing once it confirms alone, and that is
# what autoheal discards. With the 5 s default they retire and move to the other side.
PATIENT_PUBLISHERS = WorkloadOptions(client=ClientOptions(publish_timeout_s=30.0))
PROMOTE_UNSYNCED = QueueSpec(type="mirrored", ha_mode="exactly", ha_params=2,
                             ha_sync_mode="manual", ha_promote_on_failure="always",
                             ha_promote_on_shutdown="always")
# Khepri's minority: RabbitMQ 4.3 (Khepri its only metadata store), the metadata probe of every
# node once a second, and publishers that stay connected to a node cut off (a confirm may wait
# out the fault) rather than retiring to the majority after 5 s.
# The probe waits past Khepri's own command timeout (30 s) for the broker's answer, so that a
# minority's refusal (541 INTERNAL_ERROR) is recorded as the broker's, and the cut lasts long
# enough (45 s) for it to come while the node is still cut off.
KHEPRI = {"broker": BrokerConfig(rabbitmq="4.3"), "needs_metadata_store": "khepri",
          "workload": WorkloadOptions(client=ClientOptions(publish_timeout_s=30.0),
                                      metadata_probe_interval_s=1.0,
                                      metadata_probe_timeout_s=35.0)}
KHEPRI_CUT_S = 45.0
# Delayed retry and consumer timeouts (issue 31): RabbitMQ 4.3's quorum queues. The consumers
# ack as fast as deliveries come so that a delay, not the consume rate, decides a redelivery.
RETRY = {"broker": BrokerConfig(rabbitmq="4.3"), "time_limit_s": 60.0,
         "queue": QueueSpec(delivery_limit=5, delayed_retry_type="all",
                            delayed_retry_min_ms=200, delayed_retry_max_ms=2000),
         "workload": WorkloadOptions(rate=100.0, consume_rate=None, client=ClientOptions(
             reject_share=0.2, nack_share=0.1))}
TIMEOUT_WORKLOAD = WorkloadOptions(rate=100.0, consume_rate=None, consumers=3,
                                   client=ClientOptions(consumer_timeout_ms=5000,
                                                        hold_share=0.05, hold_s=8.0))
TIMEOUT = {"broker": BrokerConfig(rabbitmq="4.3"), "time_limit_s": 60.0,
           "workload": TIMEOUT_WORKLOAD}
# The consumer timeout on a queue with a single active consumer: each timeout ends the active
# consumer, and the queue must hand over to a standby (the workload's three consumers: one active,
# two waiting; an ended one's slot subscribes again half a second later).
TIMEOUT_SAC = {**TIMEOUT, "queue": QueueSpec(single_active_consumer=True)}
# The consumer timeout with clients that do not advertise consumer_cancel_notify: RabbitMQ closes
# a timed-out consumer's channel (406 PRECONDITION_FAILED) instead of sending basic.cancel.
TIMEOUT_CLOSE = {**TIMEOUT, "workload": dataclasses.replace(
    TIMEOUT_WORKLOAD,
    client=dataclasses.replace(TIMEOUT_WORKLOAD.client, consumer_cancel_notify=False))}
TIMEOUT_SAC_EXPECT = (
    "no loss; a timed-out active consumer is sent basic.cancel, receives nothing after it, and "
    "what it held comes back flagged or is dead-lettered; RabbitMQ's consumers guide: a queue "
    "with a single active consumer fails over to another registered consumer when the active "
    "one is cancelled, so after each timeout another consumer is fed within the liveness bound "
    "while messages are ready (results.json's consumer_timeout, its hand_over)")
TIMEOUT_CLOSE_EXPECT = (
    "no loss; RabbitMQ's consumer guides: a client that does not advertise "
    "consumer_cancel_notify is not sent basic.cancel, and a timed-out consumer of such a client "
    "has its channel closed with 406 PRECONDITION_FAILED; it receives nothing on that channel "
    "after the close, and what it held comes back flagged or is dead-lettered (results.json's "
    "consumer_timeout: ended_by says how each consumer was ended; a cancel is a violation)")

# Message priorities (issue 31): a quorum queue on RabbitMQ 4.3, whose 32 levels are strict (on
# 4.0, asked with --rabbitmq 4.0, two levels served at a ratio: the priority check judges its
# two-level rule; 3.10 has none and refuses the scenario, clusters.releases.refuses_priorities).
# The priority check judges deliveries to consumers of prefetch 1 that settled something before
# (checkers.spark_priority): so one consumer of prefetch 1, never competing with another, acking
# at most 40 a second. Publishers offer 100 a second, 10 of them at 9, 20 at 5, 20 without a
# priority (level 4) and 50 at 0, after a backlog of 1,000 such: the consumer can take every 9
# and most 5s, so a backlog of every lower level stands through the run and each delivery of a
# 5 or a 4 is judged against the 9s (and 5s) confirmed before it.
PRIORITIES = {"broker": BrokerConfig(rabbitmq="4.3"), "time_limit_s": 90.0,
              "workload": WorkloadOptions(rate=100.0, consumers=1, consume_rate=40.0,
                                          backlog=1000, priorities="0:5,none:2,5:2,9:1",
                                          client=ClientOptions(prefetch=1))}
PRIORITIES_EXPECT = (
    "no loss, and each publisher's messages of one priority delivered in order; RabbitMQ 4.3 "
    "promises higher-priority messages dispatched ahead of lower ones, subject to the "
    "consumer's prefetch: results.json's priority section finds no delivery handed out while "
    "a confirmed message of a higher priority was ready (its judged_count, designed to exceed "
    "1,000, is for the reader to check: the matrix judges the verdict only); returned "
    "messages, which do not keep their priority and come back ahead of fresh ones, are not "
    "judged; on 4.0 (two levels served 2:1) it finds no normal message published after a "
    "ready high one was confirmed handed out ahead of it")
PRIORITIES_JUDGED = (
    "results.json's priority section finds no delivery handed out while a confirmed message of "
    "a higher priority was ready (its judged_count is for the reader to check)")


def _khepri_minority(base: dict[str, object], interval: float = 10) -> dict[str, object]:
    """Takes a 4.3 promise's catalogue changes (issue 31: priorities, delayed retry, consumer
    timeouts) and the healthy seconds before each cut. Returns them on a Khepri minority, as
    khepri-minority has it: the Khepri store asked for, a node that does not host the queue's
    leader cut off from the other two for KHEPRI_CUT_S, its clients staying connected to it
    (publishers wait KHEPRI's publish timeout for a confirm) and every node's metadata probe
    on; the promise's own workload otherwise."""
    workload, khepri = base["workload"], KHEPRI["workload"]
    assert isinstance(workload, WorkloadOptions) and isinstance(khepri, WorkloadOptions)
    patient = dataclasses.replace(workload.client,
                                  publish_timeout_s=khepri.client.publish_timeout_s)
    return {**base, "needs_metadata_store": KHEPRI["needs_metadata_store"],
            "workload": dataclasses.replace(
                workload, client=patient,
                metadata_probe_interval_s=khepri.metadata_probe_interval_s,
                metadata_probe_timeout_s=khepri.metadata_probe_timeout_s),
            "nemesis": _faults("partition-one@follower", interval=interval,
                               duration=KHEPRI_CUT_S)}


# What a Khepri minority promises of metadata (khepri-minority), said by each promise's
# scenario on one.
KHEPRI_METADATA = (
    "the minority's declarations are refused or not answered while it is cut off, and it "
    "serves metadata again within the liveness bound after the heal")
# A partition cutting off the queue leader's node (quorum-leader-partition's fault on 4.3,
# where it is also a Khepri minority, without the probe): the default cut (2 x net_ticktime,
# 20 s) and, for a 4.3 consumer on that node, what it keeps through it.
LEADER_CUT = (
    "the majority elects a new leader; a consumer on the cut-off node gets nothing until the "
    "heal (quorum queue deliveries pause on the disconnected side) and keeps what it holds "
    "through the cut (consumer_disconnected_timeout, 60 s, is longer than the 20 s cut)")
RESTART_LEADER = _faults("kill@leader", interval=20, duration=10)
FULL_RESTART = _faults("full-restart", interval=15, duration=10)

_CATALOGUE: list[tuple[str, str, str, Expectation, str | None, dict[str, object]]] = [
    ("partition", "quorum queue, random-halves and single-node partitions; pause_minority on "
     "3.10 and 4.0 (4.3 has no partition handling)",
     "no loss: quorum queues confirm only once a majority has the message", VALID, None,
     {"time_limit_s": 90.0,  # three 20 s faults: about a minute of partitions
      "nemesis": _faults("partition-random-halves", "partition-one")}),
    ("healthy", "quorum queue, no faults: the control run",
     "valid: nothing lost, duplicated or reordered", VALID, None,
     {"nemesis": NemesisOptions(faults=())}),
    ("kill", "quorum queue, kill -9 of a random node's broker, then restart",
     "no loss: a confirmed message is on a majority's disk", VALID, None,
     {"nemesis": _faults("kill", duration=15)}),
    ("pause", "quorum queue, SIGSTOP then SIGCONT of a random node's broker",
     "no loss; a resumed node may need recovery (recorded as recover-node)", VALID, None,
     {"nemesis": _faults("pause")}),
    ("quorum-leader-partition", "quorum queue, the queue leader's node isolated; pause_minority "
     "on 3.10 and 4.0 (4.3 has no partition handling)",
     "no loss: a new leader is elected by the majority; the old one steps down", VALID, None,
     {"nemesis": _faults("partition-leader")}),
    ("quorum-leader-partition-returns",
     "as quorum-leader-partition, on RabbitMQ 4.3 with x-consumer-disconnected-timeout 0: a "
     "consumer's messages are returned as soon as its node is cut off, as before 4.3 (4.3's "
     "default keeps them 60 s, past this run's partitions; 4.0.5 showed an acked message "
     "delivered again unflagged under this schedule in 1 of 5 runs)",
     "no loss, and every delivery after the first flagged redelivered: a new leader is elected "
     "by the majority, and the cut-off consumers' messages go to the others", VALID, None,
     {"broker": BrokerConfig(rabbitmq="4.3"), "queue": QueueSpec(consumer_disconnected_timeout_ms=0),
      "nemesis": _faults("partition-leader")}),
    ("quorum-ignore", "quorum queue under cluster_partition_handling=ignore, random-halves "
     "partitions; the harness mends the split cluster (twin of mirrored-ignore-split-brain)",
     "no loss: Raft does not rely on partition handling", VALID, None,
     {"broker": BrokerConfig(partition_handling="ignore"),
      "nemesis": _faults("partition-random-halves")}),
    ("quorum-majorities-ring", "quorum queue, 5 nodes, majorities-ring and bridge partitions",
     "no loss: every node sees a majority, but no majority is the same", VALID, None,
     {"nodes": 5, "nemesis": _faults("partition-majorities-ring", "partition-bridge")}),
    ("quorum-rolling-restart", "quorum queue, rolling restart of every node",
     "no loss; clients reconnect to the other nodes", VALID, None,
     {"nemesis": _faults("rolling-restart", duration=5)}),
    ("quorum-packet-loss", "quorum queue, 90% packet loss on a random node's cluster traffic: "
     "enough to stall TCP past net_ticktime, so the node is declared down and pauses "
     "(20% loss only slows the cluster: RabbitMQ never notices it)",
     "no loss; latency rises, publishes may time out (info)", VALID, None,
     {"nemesis": _faults("packet-loss", packet_loss=0.9)}),
    ("quorum-sac-fifo", "quorum queue, single active consumer, prefetch 1, strict FIFO check",
     "strict FIFO, redeliveries included: one consumer at a time, one message in flight",
     VALID, None,
     {"queue": QueueSpec(single_active_consumer=True),
      "workload": WorkloadOptions(publishers=1, consumers=2, rate=50, consume_rate=25,
                                  client=ClientOptions(prefetch=1)),
      "check": CheckOptions(strict_order=True),
      "nemesis": _faults("kill", duration=15)}),
    ("quorum-crashing-consumers", "quorum queue, consumers crash unacked every 50 deliveries",
     "no loss; duplicates are redelivered (flagged), which at-least-once allows", VALID, None,
     {"workload": WorkloadOptions(client=ClientOptions(crash_after=50)),
      "nemesis": _faults("partition-one")}),
    ("stream-partition", "stream (3 replicas), pause_minority where the line has it, "
     "random-halves and single-node "
     "partitions; every consumer reads the log from its first offset",
     "no loss and per-publisher order for every reader: a stream confirms once a majority of "
     "replicas has the message; each consumer sees every message, so repeats are by design",
     VALID, None,
     {"queue": QueueSpec(type="stream"),
      "nemesis": _faults("partition-random-halves", "partition-one")}),
    ("khepri-minority",
     "quorum queue on the Khepri metadata store (RabbitMQ 4.3, or 4.0 with --metadata-store "
     "khepri): a node that does not host the queue's leader is cut off from the other two, and "
     "its clients stay connected to it; every node's metadata probe opens a connection, "
     "declares, binds and deletes an exchange once a second",
     "no confirmed message lost; cut off, the minority cannot change metadata (its declarations "
     "are refused with 541 or not answered, reported per fault), and it serves metadata again "
     "within the liveness bound after the heal", VALID, None,
     {**KHEPRI, "nemesis": _faults("partition-one@follower", duration=KHEPRI_CUT_S),
      "time_limit_s": 70.0}),
    ("khepri-minority-leader",
     "as khepri-minority, but the node cut off hosts the queue's leader: the majority elects a "
     "new leader, and publishes and consumers on the minority stall until the heal",
     "no confirmed message lost; the minority's declarations are refused or not answered while "
     "it is cut off, and it serves metadata again within the liveness bound after the heal",
     VALID, None,
     {**KHEPRI, "nemesis": _faults("partition-leader", duration=KHEPRI_CUT_S),
      "time_limit_s": 70.0}),
    ("quorum-delayed-retry",
     "quorum queue with delayed retry (RabbitMQ 4.3: type all, 200 ms per delivery count up "
     "to 2 s, delivery limit 5); consumers reject (requeue) a fifth of their deliveries and "
     "nack a tenth; the queue leader is killed, so a leader change falls inside some delays",
     "no loss; every rejected message is ready again no earlier than min(200 ms x its delivery "
     "count, 2 s) (less 50 ms), flagged redelivered, and dead-lettered past the limit "
     "(results.json's delayed_retry); so is every nacked message (its count unchanged: type "
     "all holds every return) and every one a consumer was lost with (from its close or its "
     "node's kill)", VALID, None,
     {**RETRY, "nemesis": _faults("kill@leader", duration=15)}),
    ("quorum-delayed-retry-healthy", "as quorum-delayed-retry, without faults (its control)",
     "valid, and the delayed_retry section judges every return (reject, nack, consumer lost "
     "with it)", VALID, None,
     {**RETRY, "nemesis": NemesisOptions(faults=())}),
    ("quorum-delayed-retry-leader-partition",
     "as quorum-delayed-retry, but the queue leader's node is cut off from the other two (20 s "
     "at a time) instead of killed: " + LEADER_CUT + "; its consumers' rejects are applied by the "
     "new leader only at the heal",
     "no loss; every rejected message is ready again no earlier than min(200 ms x its delivery "
     "count, 2 s) (less 50 ms) after its reject, flagged redelivered, and dead-lettered past "
     "the limit (results.json's delayed_retry), across the leader change as before it: a "
     "quorum queue holds a delayed message keyed by its ready-at time in its replicated state, "
     "and a reject or nack applied late only lengthens the delay; nacks are judged as rejects "
     "are", VALID, None,
     {**RETRY, "nemesis": _faults("partition-leader", interval=15)}),
    ("quorum-delayed-retry-khepri-minority",
     "as quorum-delayed-retry on a Khepri minority (as khepri-minority): a node that does not "
     "host the queue's leader is cut off (45 s), its clients stay connected to it, and every "
     "node's metadata probe runs once a second",
     "no loss; the leader keeps its majority and serves through the cut: every rejected message "
     "is ready again no earlier than min(200 ms x its delivery count, 2 s) (less 50 ms), "
     "flagged redelivered, and dead-lettered past the limit (results.json's delayed_retry); a "
     "consumer on the cut-off node gets nothing until the heal and its rejects are applied "
     "then, which only lengthens their delays; " + KHEPRI_METADATA, VALID, None,
     {**_khepri_minority(RETRY), "time_limit_s": 70.0}),
    ("quorum-consumer-timeout",
     "quorum queue (RabbitMQ 4.3), consumers with x-consumer-timeout 5 s holding 5% of their "
     "deliveries 8 s before the ack; a single node is cut off now and then",
     "no loss; a timed-out consumer is sent basic.cancel, receives nothing after it, and each "
     "message it held comes back flagged or is dead-lettered (results.json's "
     "consumer_timeout)", VALID, None,
     {**TIMEOUT, "nemesis": _faults("partition-one", interval=15)}),
    ("quorum-consumer-timeout-healthy", "as quorum-consumer-timeout, without faults (its control)",
     "valid, with at least one broker cancel judged", VALID, None,
     {**TIMEOUT, "nemesis": NemesisOptions(faults=())}),
    ("quorum-consumer-timeout-leader-kill",
     "as quorum-consumer-timeout, but the queue leader's node is killed (15 s, twice) instead "
     "of a random node cut off: its consumers lose their connections, the others' held messages and "
     "timeouts pass to a new leader",
     "no loss; a consumer that holds a message past its 5 s timeout, before or after a leader "
     "change (RabbitMQ documents no exception for one), is sent basic.cancel, receives "
     "nothing after it, and each message it held comes back flagged or is dead-lettered "
     "(results.json's consumer_timeout); the killed node's consumers' messages come back "
     "flagged", VALID, None,
     {**TIMEOUT, "nemesis": _faults("kill@leader", interval=15, duration=15)}),
    ("quorum-consumer-timeout-khepri-minority",
     "as quorum-consumer-timeout on a Khepri minority (as khepri-minority): a node that does "
     "not host the queue's leader is cut off (45 s), its clients stay connected to it, and "
     "every node's metadata probe runs once a second",
     "no loss; the leader keeps its majority: consumers on the majority side are served and "
     "timed out as in the control (basic.cancel, nothing after it, each held message back "
     "flagged or dead-lettered: results.json's consumer_timeout); a consumer on the cut-off "
     "node gets nothing until the heal, and whether what it holds comes back when its "
     "timeout fires or after consumer_disconnected_timeout (60 s), each message comes back "
     "flagged or is dead-lettered and it receives nothing after its cancel (sent at the heal "
     "at the latest); " + KHEPRI_METADATA, VALID, None,
     {**_khepri_minority(TIMEOUT), "time_limit_s": 70.0}),
    ("quorum-consumer-timeout-sac",
     "as quorum-consumer-timeout, on a queue with a single active consumer: each timeout ends "
     "the active consumer, and one of the two waiting must take over; a single node is cut off "
     "now and then", TIMEOUT_SAC_EXPECT, VALID, None,
     {**TIMEOUT_SAC, "nemesis": _faults("partition-one", interval=15)}),
    ("quorum-consumer-timeout-sac-healthy",
     "as quorum-consumer-timeout-sac, without faults (its control)",
     f"{TIMEOUT_SAC_EXPECT}; at least one hand-over judged", VALID, None,
     {**TIMEOUT_SAC, "nemesis": NemesisOptions(faults=())}),
    ("quorum-consumer-timeout-close",
     "as quorum-consumer-timeout, with clients that do not advertise the consumer_cancel_notify "
     "capability (--consumer-cancel-notify off); a single node is cut off now and then",
     TIMEOUT_CLOSE_EXPECT, VALID, None,
     {**TIMEOUT_CLOSE, "nemesis": _faults("partition-one", interval=15)}),
    ("quorum-consumer-timeout-close-healthy",
     "as quorum-consumer-timeout-close, without faults (its control)",
     f"{TIMEOUT_CLOSE_EXPECT}; at least one channel close judged", VALID, None,
     {**TIMEOUT_CLOSE, "nemesis": NemesisOptions(faults=())}),
    ("quorum-priorities",
     "quorum queue with message priorities (RabbitMQ 4.3: 32 strict levels; 0, none, 5 and 9 "
     "drawn 5:2:2:1), publishers offering 100/s after a backlog of 1,000; one consumer of "
     "prefetch 1 acking at most 40/s, so a backlog of the lower levels stands; the queue "
     "leader's node is killed (15 s) twice, so a new leader serves the priorities. About 85 s "
     "of consuming at 25-40/s: some 2,000-3,400 deliveries judged per run, all but the "
     "consumer's first after each reconnect and the returned ones",
     PRIORITIES_EXPECT, VALID, None,
     {**PRIORITIES, "nemesis": _faults("kill@leader", interval=20, duration=15)}),
    ("quorum-priorities-healthy", "as quorum-priorities, without faults (its control): some "
     "2,200-3,600 deliveries judged per run (90 s at 25-40/s)",
     PRIORITIES_EXPECT, VALID, None,
     {**PRIORITIES, "nemesis": NemesisOptions(faults=())}),
    ("quorum-priorities-leader-partition",
     "as quorum-priorities, but the queue leader's node is cut off from the other two (20 s, "
     "twice) instead of killed: " + LEADER_CUT + ". Some 1,000-3,400 deliveries judged per "
     "run (50-85 s of consuming at 20-40/s)",
     "no loss, and each publisher's messages of one priority delivered in order; the new "
     "leader dispatches by the same strict priorities as the old (the queue's ready messages "
     "by priority are its replicated state), subject to the consumer's prefetch: "
     + PRIORITIES_JUDGED + "; the message the consumer held through the cut, and any returned "
     "one, are not judged; on 4.0 its two-level rule is judged the same way", VALID, None,
     {**PRIORITIES, "nemesis": _faults("partition-leader", interval=20)}),
    ("quorum-priorities-khepri-minority",
     "as quorum-priorities on a Khepri minority (as khepri-minority): a node that does not "
     "host the queue's leader is cut off once (45 s, from 30 s), its clients stay connected to "
     "it, and every node's metadata probe runs once a second. Some 1,100-3,800 deliveries "
     "judged per run (55-95 s of consuming at 20-40/s)",
     "no loss, and each publisher's messages of one priority delivered in order; the leader "
     "keeps its majority and the queue keeps serving through it: deliveries to a consumer on "
     "the majority side stay strictly by priority through the cut, subject to its prefetch: "
     + PRIORITIES_JUDGED + "; a consumer on the cut-off node gets nothing until the heal "
     "and then the same order; publishes through the minority are confirmed only after the "
     "heal (or time out: info), and only confirmed ones count as ready; " + KHEPRI_METADATA,
     VALID, None,
     {**_khepri_minority(PRIORITIES, interval=30), "time_limit_s": 100.0}),
    # -- documented losses, each with its safe twin under the same fault schedule ----------------
    ("mirrored-master-partition",
     "mirrored queue (ha-mode all), autoheal, the master's node isolated: both sides accept "
     "publishes; at heal autoheal restarts the losing side (the old master's)",
     "loss: autoheal discards what the losing side confirmed during the partition",
     loss(), "quorum-autoheal-leader-partition",
     {"broker": BrokerConfig(partition_handling="autoheal"), "queue": MIRRORED_ALL,
      "workload": PATIENT_PUBLISHERS, "nemesis": _faults("partition-leader", interval=15)}),
    ("quorum-autoheal-leader-partition",
     "quorum queue, autoheal, the leader's node isolated (twin of mirrored-master-partition)",
     "no loss: only a majority confirms, and autoheal's restart of the minority loses nothing",
     VALID, None,
     {"broker": BrokerConfig(partition_handling="autoheal"), "workload": PATIENT_PUBLISHERS,
      "nemesis": _faults("partition-leader", interval=15)}),
    ("mirrored-ignore-split-brain",
     "mirrored queue (ha-mode all), cluster_partition_handling=ignore, random-halves "
     "partitions: each side promotes its own master; after the heal the harness mends the "
     "split cluster by restarting nodes, as an operator must",
     "loss: the restarted side's master and everything only it confirmed are discarded",
     loss(), "quorum-ignore",
     {"broker": BrokerConfig(partition_handling="ignore"), "queue": MIRRORED_ALL,
      "nemesis": _faults("partition-random-halves")}),
    ("mirrored-partition", "mirrored queue (ha-mode all, automatic sync), autoheal, "
     "random-halves partitions",
     "loss: autoheal restarts the losing side and discards what it accepted", loss(), None,
     {"broker": BrokerConfig(partition_handling="autoheal"), "queue": MIRRORED_ALL,
      "workload": PATIENT_PUBLISHERS, "nemesis": _faults("partition-random-halves")}),
    ("mirrored-pause-minority", "mirrored queue (ha-mode all), pause_minority, partitions",
     "no loss predicted: the minority pauses and a synchronised mirror is promoted (Jepsen "
     "lost messages here in 2014 through the detection window)", VALID, None,
     {"queue": MIRRORED_ALL, "nemesis": _faults("partition-random-halves", "partition-one")}),
    ("mirrored-unsynced-promotion",
     "mirrored queue (exactly 2, manual sync, ha-promote-on-failure=always): a mirror's node "
     "is restarted, so a new mirror starts empty and is never synchronised; then the master "
     "is killed while the older backlog is still queued",
     "loss: the unsynchronised mirror is promoted and the backlog it never had is gone",
     loss(), "mirrored-synced-promotion",
     {"queue": PROMOTE_UNSYNCED, "workload": SLOW_CONSUMERS, "nemesis": UNSYNCED_FAULTS,
      "time_limit_s": 75.0}),
    ("mirrored-synced-promotion",
     "as mirrored-unsynced-promotion but ha-promote-on-failure=when-synced (its twin)",
     "no loss: an unsynchronised mirror is not promoted; the queue waits for its master",
     VALID, None,
     {"queue": dataclasses.replace(PROMOTE_UNSYNCED, ha_promote_on_failure="when-synced",
                                   ha_promote_on_shutdown="when-synced"),
      "workload": SLOW_CONSUMERS, "nemesis": UNSYNCED_FAULTS, "time_limit_s": 75.0}),
    ("mirrored-manual-sync-rejoin",
     "mirrored queue (ha-mode all, ha-sync-mode manual, default promotion): both mirrors' "
     "nodes restart at once and rejoin empty; then the master is killed before the older "
     "backlog is consumed",
     "loss: the oldest mirror is promoted although it never had the older backlog",
     loss(), "quorum-followers-restart",
     {"queue": dataclasses.replace(MIRRORED_ALL, ha_sync_mode="manual"),
      "workload": SLOW_CONSUMERS, "nemesis": REJOIN_FAULTS, "time_limit_s": 75.0}),
    ("quorum-followers-restart",
     "quorum queue: both followers restart at once, then the leader is killed (twin of "
     "mirrored-manual-sync-rejoin)",
     "no loss: restarted followers catch up from the Raft log before they can lead",
     VALID, None,
     {"workload": SLOW_CONSUMERS, "nemesis": REJOIN_FAULTS, "time_limit_s": 75.0}),
    ("transient-node-restart",
     "durable classic queue, transient messages, the queue's node killed and restarted",
     "loss: transient messages live in memory and die with the node", loss(),
     "durable-node-restart",
     {"queue": CLASSIC, "workload": WorkloadOptions(client=ClientOptions(persistent=False)),
      "nemesis": RESTART_LEADER, "time_limit_s": 45.0}),
    ("nondurable-node-restart",
     "non-durable classic queue, persistent messages, the queue's node killed and restarted",
     "loss: a non-durable queue does not survive its node's restart, nor do its messages",
     loss(), "durable-node-restart",
     {"queue": dataclasses.replace(CLASSIC, durable=False), "nemesis": RESTART_LEADER,
      "time_limit_s": 45.0}),
    ("durable-node-restart",
     "durable classic queue, persistent messages, the queue's node killed and restarted "
     "(twin of transient-node-restart and nondurable-node-restart)",
     "no loss: confirmed persistent messages are on disk", VALID, None,
     {"queue": CLASSIC, "nemesis": RESTART_LEADER, "time_limit_s": 45.0}),
    ("transient-full-restart", "durable classic queue, transient messages, full-cluster restart",
     "loss: transient messages still queued at the restart are gone", loss(),
     "durable-full-restart",
     {"queue": CLASSIC, "workload": WorkloadOptions(client=ClientOptions(persistent=False)),
      "nemesis": FULL_RESTART}),
    ("durable-full-restart", "durable classic queue, persistent messages, full-cluster restart "
     "(twin of transient-full-restart)",
     "no loss: durable queues and persistent messages survive a restart", VALID, None,
     {"queue": CLASSIC, "nemesis": FULL_RESTART}),
    ("durable-graceful-restart",
     "durable classic queue, persistent messages, consumers holding a fifth of their "
     "deliveries 10 s before the ack; the queue's node stopped gracefully and started again "
     "while they hold them (RabbitMQ 4.3.6 hands such messages out again unflagged after the "
     "restart: its classic queue no longer keeps, across a graceful stop, which messages were "
     "delivered)",
     "no loss, and every delivery after a message's first flagged redelivered, the held "
     "messages' included (RabbitMQ's reliability guide: without the flag the message has not "
     "been seen before; unflagged_redelivered makes the queue invalid here)", VALID, None,
     {"queue": CLASSIC, "check": CheckOptions(unflagged_redeliveries_invalid=True),
      "workload": WorkloadOptions(client=ClientOptions(hold_share=0.2, hold_s=10.0)),
      "nemesis": _faults("stop@leader", interval=20, duration=10), "time_limit_s": 60.0}),
    # A power loss (issue 32): the nodes' data directories on the unsynced layer (lazyfs, turned
    # on by the fault: TestSpec.backend_as_run), the targets killed and their unsynced writes
    # dropped, then booted again. RabbitMQ confirms a quorum queue's message once a majority of
    # its members has fsynced it to their logs, so neither loses a confirmed message.
    ("quorum-power-loss-minority",
     "quorum queue, power loss on a minority: its brokers killed and their unsynced writes "
     "dropped, then restarted",
     "no loss: a confirmed message was fsynced by a majority, which the loss leaves whole",
     VALID, None, {"nemesis": _faults("power-loss@minority", interval=20, duration=10),
                   "time_limit_s": 60.0}),
    ("quorum-power-loss-majority",
     "quorum queue, power loss on a majority: its brokers killed and their unsynced writes "
     "dropped, then restarted (the queue has no quorum until they are back)",
     "no loss: a confirmed message was fsynced by a majority, and an fsynced write survives a "
     "power loss, so every member the loss hit comes back with what it had confirmed",
     VALID, None, {"nemesis": _faults("power-loss@majority", interval=20, duration=10),
                   "time_limit_s": 60.0}),
    ("quorum-power-loss-all",
     "quorum queue, power loss on every node at once: every broker killed and every unsynced "
     "write dropped, then the cluster restarted",
     "no loss: a quorum queue confirms only once a majority has fsynced the message, so the "
     "synced logs of a majority still hold it",
     VALID, None, {"nemesis": _faults("power-loss@all", interval=20, duration=10),
                   "time_limit_s": 60.0}),
    # The same power losses on the other queue kinds (issue 32). A durable classic queue confirms
    # a persistent message once it is persisted to disk (RabbitMQ's publisher confirms guide:
    # for a persistent message routed to a durable queue, accepted means persisted to disk), so
    # a power loss of its node, or of every node, loses none. A stream confirms once a majority of its replicas has
    # the message, but never fsyncs it (RabbitMQ's streams guide, "Data Safety": streams rely on
    # replication, not on flushing to disk, and a correlated failure of every node may lose
    # data the operating system had not yet written): a minority's loss leaves the majority's
    # copies, every node's loss leaves none of what was written since the last writeback.
    ("classic-power-loss-node",
     "durable classic queue, persistent messages, power loss on the queue's node: its broker "
     "killed and its unsynced writes dropped, then restarted",
     "no loss: a persistent message routed to a durable queue is confirmed once it is persisted "
     "to disk, which the power loss leaves",
     VALID, None, {"queue": CLASSIC, "nemesis": _faults("power-loss@leader", interval=20,
                                                        duration=10),
                   "time_limit_s": 60.0}),
    ("classic-power-loss-all",
     "durable classic queue, persistent messages, power loss on every node at once: every "
     "broker killed and every unsynced write dropped, then the cluster restarted",
     "no loss: a persistent message routed to a durable queue is confirmed once it is persisted "
     "to disk, whatever happens to the other nodes",
     VALID, None, {"queue": CLASSIC, "nemesis": _faults("power-loss@all", interval=20,
                                                        duration=10),
                   "time_limit_s": 60.0}),
    ("stream-power-loss-minority",
     "stream (3 replicas), power loss on a minority: its brokers killed and their unsynced "
     "writes dropped, then restarted; every consumer reads the log from its first offset",
     "no loss and per-publisher order for every reader: a stream confirms once a majority of "
     "replicas has the message, and the majority's copies (in their page caches, written back "
     "later) are untouched by the minority's loss",
     VALID, None, {"queue": QueueSpec(type="stream"),
                   "nemesis": _faults("power-loss@minority", interval=20, duration=10),
                   "time_limit_s": 60.0}),
    ("stream-power-loss-all",
     "stream (3 replicas), power loss on every node at once: every broker killed and every "
     "unsynced write dropped, then the cluster restarted (twin of quorum-power-loss-all)",
     "loss, as documented: streams do not fsync and rely on replication (RabbitMQ's streams "
     "guide), so a power loss of every replica loses the confirmed messages not yet written "
     "back (here, by the layer's model, those written within about 30-40 s of the cut); the "
     "quorum queue twin fsyncs and loses none",
     loss(), "quorum-power-loss-all",
     {"queue": QueueSpec(type="stream"),
      "nemesis": _faults("power-loss@all", interval=20, duration=10), "time_limit_s": 60.0}),
    # A disk corruption (issue 32), Jepsen's file nemesis aimed at the queue: a minority's
    # brokers killed, one of the queue's files on each damaged (a segment of its own, or the
    # node's WAL), then booted again. Ra checksums every entry of its WAL and segments; a member
    # that finds a damaged one may crash, refuse to boot (recorded: node-did-not-boot) or drop
    # the damaged tail and catch up from the leader. The documentation's promise (a confirmed
    # message is on a majority's disks) does not depend on which: the majority is untouched.
    ("quorum-disk-corrupt-minority",
     "quorum queue, disk corruption on a minority: its brokers killed, bits flipped in a 4 KiB "
     "chunk of one of the queue's segment or WAL files (one bit in a thousand, at a random "
     "offset), then restarted",
     "no loss: a confirmed message is on a majority's disks, which the corruption leaves whole; "
     "the damaged member crashes, stays down or repairs from the others (its effects say which)",
     VALID, None, {"nemesis": _faults("disk-corrupt@minority", interval=20, duration=10),
                   "time_limit_s": 60.0}),
    ("quorum-disk-corrupt-leader-truncate",
     "quorum queue, disk corruption of the leader: its broker killed, the last 4 KiB of one of "
     "the queue's segment or WAL files cut, then restarted",
     "no loss: the cut entries are on the followers, a majority, which elect a new leader; the "
     "old leader comes back as a follower and is sent what it lost",
     VALID, None, {"nemesis": _faults("disk-corrupt@leader:corrupt_mode=truncate", interval=20,
                                      duration=10),
                   "time_limit_s": 60.0}),
]

SCENARIOS: dict[str, Scenario] = {
    name: Scenario(
        dataclasses.replace(
            TestSpec(name=name, description=desc), **changes,  # type: ignore[arg-type]
        ).for_queue(),
        text, expect, twin,
    )
    for name, desc, text, expect, twin, changes in _CATALOGUE
}


def partitions_or_kills_leader(spec: TestSpec) -> bool:
    """Takes a spec. Returns whether one of its faults is a partition (of any shape) or a kill of
    the queue leader's node: the faults that clients which stay through them (`--stay`) meet as
    a stall, whose heal the settlement judgement (checkers.settlement) then watches."""
    for entry in spec.nemesis.entries():
        kind = fault_info(entry.fault).kind
        targets = spec.nemesis.resolve(entry).targets
        if kind == PARTITION or (kind == KILL and targets == "leader"):
            return True
    return False


def staying_candidates() -> list[str]:
    """Returns the catalogue's scenarios that `--stay-variants` runs with clients that stay: each
    whose faults `partitions_or_kills_leader`, in the catalogue's order (a scenario added with
    such faults is one at once)."""
    return [n for n, sc in SCENARIOS.items() if partitions_or_kills_leader(sc.spec)]


def not_applicable(spec: TestSpec) -> list[tuple[str, str]]:
    """Takes a scenario's spec. Returns where it cannot run, from the release table: each
    release line, and each metadata store a line runs only when asked, whose refusal
    (TestSpec.refusal) says why, as ("4.0", why) or ("4.0 with --metadata-store khepri", why),
    in the table's order."""
    out = []
    for line, rel in RELEASES.items():
        for store in rel.metadata_stores:
            asked = store != rel.default_metadata_store
            there = dataclasses.replace(spec, broker=dataclasses.replace(
                spec.broker, rabbitmq=line, metadata_store=store if asked else None))
            why = there.refusal()
            if why:
                out.append((f"{line} with --metadata-store {store}" if asked else line, why))
    return out


def scenario(name: str) -> TestSpec:
    """Returns the spec of a named scenario. Raises SpecError listing the known names."""
    try:
        return SCENARIOS[name].spec
    except KeyError:
        raise SpecError(
            f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}"
        ) from None
