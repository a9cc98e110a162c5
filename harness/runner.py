"""A run, phase by phase: setup -> main -> heal -> recovery -> drain -> teardown -> check -> report.

Between setup and main, the nodes' unsynced layers, if any, are settled (`Run.settle`,
harness.settle): what the cluster wrote while it was set up is made durable, as a host's
writeback would have made it, unless the spec keeps the cluster young (`--young-cluster`).

The main phase is the time limit with the nemesis, then the workload alone after the last heal
(`Run.after_heal`) until confirms and deliveries are seen back (checkers.resume_watch) or the
spec's `after_heal_limit_s` (the liveness bound plus a publish's and a reconnection's timeout:
50.5 s by default) has passed since the heal, so that the liveness check can judge it.

`run_test` takes a validated spec and returns the exit code (0 valid, 1
invalid, 2 unknown or infrastructure error). Whatever happens -- an error,
Ctrl-C, SIGTERM -- the nemesis heals, the cluster is torn down by pid, and the
run directory keeps what was recorded. Each phase's start and end is a
harness event in the history. An optional observer (harness.progress) sees
every op as it is recorded, for the CLI's live progress; a replayed run
records the run it repeats in test.json as `replay_of`. Beside test.json the
run writes scenario.toml, its spec with its faults as played
(harness.scenario_file), which `run --scenario-file` plays again.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkers.resume_watch import ResumeWatch
from clusters.backend import BackendError
from clusters.rabbitmq import BrokerError, RabbitBroker
from clusters.rabbitmq_admin import RabbitAdmin, policy_mismatch
from clusters.registry import make_cluster
from clusters.releases import line_of
from clusters.remote import RemoteError
from harness import store
from harness.check import check_run, exit_code
from harness.errors import HarnessError
from harness.health import MemorySampler, record_verdict_delay
from harness.placement import QueueSampler
from harness.progress import ObservedHistory, RunObserver
from harness.recovery import RecoveryReport, grace_s, recover, restart_each
from harness.scenario_file import write_run_scenario
from harness.settle import settle_layers
from harness.spec import TestSpec
from harness.unbootable import record_unbootable
from history import HARNESS, STOP_WORKERS, Op
from nemesis import NemesisError, NemesisInterpreter
from workloads import Workload
from workloads.clients import ClientError
from workloads.kinds import kind_of
from workloads.metadata_probe import MetadataProbe, ProbeSettings
from workloads.queue_spec import ha_policy
from workloads.queue_workload import QueueWorkload

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = PROJECT_ROOT / ".state"


class Interrupted(HarnessError):
    """The run was asked to stop (SIGINT or SIGTERM)."""


@dataclass
class RunOutcome:
    """What the controller learnt, for test.json and the exit code."""

    run_dir: Path
    phase_times: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False
    error: str | None = None
    recovery: RecoveryReport | None = None
    drain: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    # The nodes that would not boot again after the faults (harness.unbootable).
    unrecoverable: list[str] = field(default_factory=list)


@contextlib.contextmanager
def run_lock() -> Iterator[None]:
    """Holds the machine-wide lock of local clusters: two runs would share names and addresses."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError("another run holds .state/lock; wait for it or `make clean`") from None
        yield


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """Turns SIGTERM into Interrupted for the duration (SIGINT already raises KeyboardInterrupt)."""
    def handler(_sig: int, _frame: object) -> None:
        raise Interrupted("SIGTERM")
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """Ignores SIGINT/SIGTERM while cleaning up, so a second Ctrl-C cannot leave debris."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def attach_log(run_dir: Path) -> logging.Handler:
    """Sends every log record of the run to run_dir/harness.log. Returns the handler."""
    h = logging.FileHandler(run_dir / store.LOG)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
    h.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(h)
    return h


def also(first: Callable[[Op], None], then: Callable[[Op], None]) -> Callable[[Op], None]:
    """Takes two observers of ops. Returns one calling both, `first` before `then`; `then`,
    should it raise, is logged once and dropped, and `first` goes on seeing every op."""
    alive = [then]

    def both(op: Op) -> None:
        first(op)
        if alive:
            try:
                alive[0](op)
            except Exception:
                log.exception("an observer of the run failed; it sees no more ops")
                alive.clear()
    return both


class Run:
    """One run of one spec against a fresh local cluster; an observer, when given, sees every
    op recorded."""

    def __init__(self, spec: TestSpec, run_dir: Path,
                 observer: RunObserver | None = None) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.outcome = RunOutcome(run_dir)
        # Sees every op: when everything came back after the last heal, the main phase may end.
        self.watch = ResumeWatch(confirms=spec.workload.client.confirms)
        self.history = ObservedHistory(
            run_dir / store.HISTORY, self.watch.observe if observer is None
            else also(self.watch.observe, observer.observe))
        self.cluster = make_cluster(spec.backend, spec.nodes, run_dir.name, STATE_DIR)
        self.broker = RabbitBroker(self.cluster.nodes, spec.broker, self.cluster.data_root)
        self.admin = RabbitAdmin(self.broker)
        self.workload: Workload = QueueWorkload(spec.queue, spec.workload, self.cluster.nodes,
                                                self.history, seed=spec.seed)
        self.probe = self.metadata_probe()
        self.nemesis: NemesisInterpreter | None = None
        self.test_info: dict[str, Any] = {
            "name": spec.name,
            "start_time": datetime.now(UTC).isoformat(timespec="seconds"),
            # The wall clock at history time 0: lines broker logs up with the history.
            "history_start_unix": self.history.start_unix,
            "spec": spec.to_dict(), "seed": spec.seed, "backend": spec.backend.kind,
            "nodes": {n.name: n.ip for n in self.cluster.nodes},
            "versions": {},
            # What the queue's kind says of its settings: the report shows it (reports/ knows
            # no queue kinds).
            "queue_description": kind_of(spec.queue).describe(spec.to_dict()["queue"]),
            # Where the broker differs from RabbitMQ's defaults, and when RabbitMQ notices a
            # silent fault (the report and the strength verdict read these).
            "broker_differences": spec.broker_differences(),
            "detection_s": list(spec.detection_s()),
            "fault_warnings": spec.warnings(),
            # How long the workload may run on after the last heal (Run.after_heal).
            "after_heal": {"limit_s": spec.after_heal_limit_s(),
                           "bound_s": spec.liveness_bound().bound_ns / 1e9,
                           "asked_s": spec.after_heal_s,
                           # With clients that stay, it runs at least this long (--stay).
                           "floor_s": spec.after_heal_floor_s()},
        }

    def metadata_probe(self) -> MetadataProbe | None:
        """Returns the metadata probe of every node the spec asks for (its workload's
        `metadata_probe_interval_s` above 0), numbering its processes in the queue workload's
        sequence, or None."""
        w = self.spec.workload
        if not w.metadata_probe_interval_s > 0 or not isinstance(self.workload, QueueWorkload):
            return None
        return MetadataProbe(self.cluster.nodes, self.history,
                             ProbeSettings(w.metadata_probe_interval_s,
                                           w.metadata_probe_timeout_s, w.client),
                             self.workload.pids)

    # -- bookkeeping -------------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Records a phase's start and end in the history and its duration."""
        log.info("phase %s", name)
        t0 = time.monotonic()
        self.history.append(Op(type="info", process=HARNESS, f="phase",
                               value={"phase": name, "state": "start"}))
        yield
        self.history.append(Op(type="info", process=HARNESS, f="phase",
                               value={"phase": name, "state": "end"}))
        self.outcome.phase_times[name] = round(time.monotonic() - t0, 2)

    def save_test_json(self) -> None:
        """Writes test.json with the spec, seed, versions and what the run learnt so far."""
        o = self.outcome
        info = {
            **self.test_info,
            "phase_seconds": o.phase_times,
            "interrupted": o.interrupted,
            "error": o.error,
            "recovery": None if o.recovery is None else o.recovery.__dict__,
            "unrecoverable": o.unrecoverable,
            "drain": o.drain,
            "history_ops": self.history.count,
        }
        store.write_json(self.run_dir / store.TEST, info)

    # -- phases -------------------------------------------------------------------------

    def setup(self) -> None:
        """Builds the namespaces, boots and joins the brokers, declares the queue."""
        with self.phase("setup"):
            self.broker.use(self.cluster.launcher(self.broker.release))
            self.cluster.create()
            self.broker.start_all(self.spec.boot_timeout_s)
            formed_healthy = self.broker.form_cluster()
            if self.broker.enable_metadata_store() or not formed_healthy:
                rep = recover(self.broker, self.history, timeout=60, grace=60)
                if not rep.healthy:
                    raise BrokerError(f"fresh cluster is not healthy: {rep.last_status}")
            self.test_info["versions"] = self.broker.versions()
            self.check_release(self.test_info["versions"])
            self.workload.setup(self.admin)
            self.check_policy()
            self.test_info["placement_at_start"] = self.admin.queue_placement(self.spec.queue.name)
            self.save_test_json()

    def settle(self) -> None:
        """Once the cluster is set up, just before the main phase: makes everything the nodes
        wrote durable on their unsynced layers (harness.settle), unless the spec keeps the
        cluster young on purpose (backend.settle_layers false, `--young-cluster`); test.json's
        `settled` says what each layer wrote back. Does nothing without the layers. Raises
        ClusterError when a layer cannot settle."""
        if not self.spec.backend.settle_layers:
            if self.spec.backend.unsynced_fs:
                log.info("lazyfs: the layers are not settled (--young-cluster): the faults find "
                         "the setup's unsynced writes inside the writeback window")
            return
        settled = settle_layers(self.cluster, self.history)
        if settled:
            self.test_info["settled"] = settled
            self.save_test_json()

    def check_policy(self) -> None:
        """Records the policy the broker applied to the queue beside the one the harness set
        (test.json's `policy`), and raises BrokerError when a key of it did not take effect: a
        mirroring policy another policy outranks, or one the broker ignored, would test an
        unmirrored queue."""
        spec = self.spec.queue
        asked = ha_policy(spec, {n.name: n.erlang_name for n in self.cluster.nodes})
        if asked is None:
            return
        applied = self.admin.effective_policy(spec.name)
        self.test_info["policy"] = {"asked": asked, "applied": applied}
        wrong = policy_mismatch(asked, applied)
        if wrong:
            raise BrokerError(f"the policy set on {spec.name} did not take effect: "
                              + "; ".join(wrong))

    def check_release(self, versions: dict[str, Any]) -> None:
        """Raises BrokerError when the nodes run another release line, or another metadata
        store, than the spec asked for (an SSH host's or an image's packages decide)."""
        asked = self.broker.release.line
        got = line_of(str(versions.get("rabbitmq", "")))
        if got != asked:
            raise BrokerError(f"asked for RabbitMQ {asked} (--rabbitmq), but the nodes run "
                              f"{versions.get('rabbitmq') or 'an unknown version'}")
        store = versions.get("metadata_store")
        if store != self.spec.broker.store:
            raise BrokerError(f"asked for the {self.spec.broker.store} metadata store, "
                              f"but the nodes use {store or 'an unknown one'}")

    def main(self) -> None:
        """Runs the workload and the nemesis for the time limit, then the workload alone after
        the last heal (`after_heal`), all of it the main phase."""
        assert self.spec.seed is not None
        stop = threading.Event()  # the workload's and the sampler's
        faults_over = threading.Event()  # the nemesis's: it stops first
        # Seeded from the spec, so a run can be repeated; set up now (chains created, netem
        # probed), so a fault that cannot run here fails before the main phase.
        self.nemesis = NemesisInterpreter(self.cluster, self.broker, self.history,
                                          self.spec.nemesis, self.spec.seed,
                                          self.spec.queue.name, faults_over, admin=self.admin)
        self.nemesis.setup()
        self.test_info["nemesis_options"] = self.spec.nemesis.to_dict()
        workload = self.workload
        sampler = QueueSampler(self.admin, self.cluster.nodes, self.spec.queue.name,
                               self.history, self.spec.placement_interval_s, stop,
                               depth=lambda node: workload.depth(self.admin, node))
        nemesis = self.nemesis
        with self.phase("main"):
            self.test_info["main_started_unix"] = time.time()  # for harness.health
            self.workload.start(stop, fault_active=lambda: nemesis.active is not None)
            if self.probe is not None:
                self.probe.start(stop)
            # No fault starts that the time limit would cut short.
            self.nemesis.start(deadline=time.monotonic() + self.spec.time_limit_s)
            sampler.start()
            try:
                faults_over.wait(self.spec.time_limit_s)
                faults_over.set()
                self.nemesis.join()  # the fault in hand stopped: the last heal is recorded
                self.after_heal()
            finally:
                faults_over.set()
                # Where the workers' cancels and closes begin: the main phase's end op comes
                # only after they, the nemesis and the sampler have finished.
                self.history.append(Op(type="info", process=HARNESS, f=STOP_WORKERS,
                                       value={"phase": "main"}))
                stop.set()
                self.workload.join()
                if self.probe is not None:
                    self.probe.join()
                self.nemesis.join()
                sampler.join()
        self.test_info["main_ended_unix"] = time.time()

    def after_heal(self) -> None:
        """Keeps the workload running after the last heal until confirms and deliveries are seen
        back (checkers.resume_watch, the liveness check's rules) or `after_heal_limit_s` has
        passed since the heal, so that the liveness check can judge the run; a run without a
        healed fault, or with after_heal_s 0, goes on at once; with staying clients it runs at
        least `after_heal_floor_s` after the heal. Records test.json's
        `after_heal`: the limit, the bound, the last heal, how long it ran and why it ended."""
        limit = self.spec.after_heal_limit_s()
        heal = self.watch.last_heal_ns
        info = self.test_info["after_heal"]
        info["last_heal_s"] = None if heal is None else round(heal / 1e9, 3)
        if heal is None or limit <= 0:
            info.update(ended="no healed fault" if heal is None else "off", ran_s=0.0)
            return
        began = self.history.now()
        back = self.watch.wait(self.history.now, heal + round(limit * 1e9))
        # Staying clients are judged at the bound (checkers.settlement): not sooner.
        floor = min(limit, self.spec.after_heal_floor_s())
        time.sleep(max(0.0, (heal + round(floor * 1e9) - self.history.now()) / 1e9))
        end = self.history.now()
        info.update(ended="resumed" if back else "limit", ran_s=round((end - began) / 1e9, 3),
                    after_heal_s=round((end - heal) / 1e9, 3))
        log.info("after the last heal: the workload ran %.1f s more (%s; limit %g s after it)",
                 info["ran_s"], "confirms and deliveries were back" if back
                 else "the limit passed", limit)

    def heal(self) -> None:
        """Ends every fault the nemesis left, whatever state it is in."""
        if self.nemesis is None:
            return
        with self.phase("heal"):
            self.nemesis.heal()

    def grace(self) -> float:
        """Returns how long a node may stay unhealthy before it is mended: partition detection
        takes up to net_ticktime, and a node needs time to rejoin after it."""
        return grace_s(self.spec.broker.net_ticktime)

    def recover(self) -> None:
        """Waits until the cluster is whole, mending stuck nodes; a node still down at the end is
        recorded as one that would not boot (harness.unbootable), and the drain does without
        it."""
        with self.phase("recovery"):
            self.outcome.recovery = recover(
                self.broker, self.history, self.spec.recovery_timeout_s, self.grace(),
                read_logs=self.broker.read_logs,
            )
            self.outcome.unrecoverable = record_unbootable(self.broker, self.history,
                                                           self.outcome.recovery)
            self.test_info["placement_after_recovery"] = self.admin.queue_placement(
                self.spec.queue.name
            )

    def drain(self) -> None:
        """Consumes what is left from every node that serves (not those that would not boot)
        until the broker proves the queue empty. The drain's end event says whether it did
        (`complete`) and, if not, why (`reason`)."""
        log.info("phase drain")
        self.history.append(Op(type="info", process=HARNESS, f="phase",
                               value={"phase": "drain", "state": "start"}))
        t0 = time.monotonic()
        down = tuple(self.outcome.unrecoverable)
        rep = self.workload.drain(self.admin, down)
        if not rep.complete and rep.errors and self.outcome.recovery is not None \
                and self.outcome.recovery.healthy:
            # The cluster is whole but no node could serve the queue: mend it, then drain again.
            reason = "queue not drained: " + "; ".join(sorted(set(rep.errors.values())))[:250]
            log.warning("%s; restarting each node's app, then draining again", reason)
            mended = restart_each(self.broker, self.history, reason,
                                  self.spec.recovery_timeout_s, self.grace())
            self.outcome.recovery.actions.extend(mended.actions)
            again = self.workload.drain(self.admin, down)
            for node, n in again.delivered.items():
                again.delivered[node] = n + rep.delivered.get(node, 0)
            rep = again
        self.outcome.drain = rep.__dict__
        self.outcome.phase_times["drain"] = round(time.monotonic() - t0, 2)
        state = "end" if rep.complete else "incomplete"
        self.history.append(Op(type="info", process=HARNESS, f="phase",
                               value={"phase": "drain", "state": state, **rep.__dict__}))

    def clean_probe(self) -> None:
        """Deletes the metadata probe's leftover queues (after the drain, which they cannot
        touch) and records what it did in test.json's `metadata_probe`; never raises."""
        if self.probe is not None:
            self.test_info["metadata_probe"] = self.probe.cleanup()

    def teardown(self) -> None:
        """Stops brokers, copies node logs into the run directory, removes the cluster."""
        t0 = time.monotonic()
        try:
            self.broker.stop_all()
        except (RemoteError, BrokerError) as e:
            log.warning("stopping brokers: %s", e)
        try:
            self.cluster.fetch_logs(self.broker, self.run_dir / store.NODES)
        except (OSError, RemoteError) as e:
            log.warning("collecting node logs: %s", e)
        try:
            self.cluster.destroy()
        except (RemoteError, OSError) as e:  # `make clean` removes what is left
            log.warning("destroying the cluster: %s", e)
        self.outcome.phase_times["teardown"] = round(time.monotonic() - t0, 2)

    def execute(self) -> RunOutcome:
        """Runs every phase; always heals and tears down. Returns the outcome (results unset)."""
        try:
            with signals_as_interrupt():
                self.setup()
                self.settle()
                self.main()
                self.heal()
                self.recover()
                self.drain()
                self.clean_probe()
        except (KeyboardInterrupt, Interrupted) as e:
            self.outcome.interrupted = True
            self.outcome.error = f"interrupted ({type(e).__name__})"
            log.warning("interrupted: healing and tearing down")
        except BackendError as e:  # the backend could not provide its cluster; the message says why
            self.outcome.error = f"{type(e).__name__}: {e}"
            log.error("run failed: %s", e)
        except (BrokerError, RemoteError, ClientError, NemesisError, RuntimeError, OSError) as e:
            self.outcome.error = f"{type(e).__name__}: {e}"
            log.exception("run failed")
        finally:
            with uninterruptible():
                if self.nemesis is not None:
                    try:
                        self.nemesis.heal()
                    except Exception:  # heal is best-effort here; teardown removes everything anyway
                        log.exception("final heal failed")
                self.history.append(Op(type="info", process=HARNESS, f="phase",
                                       value={"phase": "teardown", "state": "start"}))
                self.teardown()
                self.history.close()
                self.save_test_json()
                write_run_scenario(self.run_dir, self.spec)  # scenario.toml: the run as played
        return self.outcome


def run_test(spec: TestSpec, store_root: Path, observer: RunObserver | None = None,
             replay_of: str | None = None) -> tuple[int, RunOutcome]:
    """Takes a validated spec with a seed, the store root, an optional observer of the ops as
    they are recorded and, for a replay, the path of the run it repeats (test.json's
    `replay_of`). Runs it, its untimed faults lasting long enough to be noticed
    (TestSpec.resolved). Returns (exit code, outcome)."""
    spec = spec.resolved()
    with run_lock():
        run_dir = store.new_run_dir(store_root, spec.name)
        # The harness's own memory, from the run's start to its verdict (health.jsonl).
        memory = MemorySampler(run_dir)
        memory.start()
        try:
            outcome = _execute(spec, run_dir, observer, replay_of)
        except BaseException:
            memory.stop()
            raise
    try:
        if outcome.error and not outcome.interrupted and outcome.phase_times.get("main") is None:
            return 2, outcome  # the cluster never got going: nothing to check
        if observer is not None:
            observer.stage("check")
        outcome.results = record_verdict_delay(
            run_dir, check_run(run_dir, spark_master=spec.check.spark_master))
        return exit_code(outcome.results), outcome
    finally:
        memory.stop()


def _execute(spec: TestSpec, run_dir: Path, observer: RunObserver | None,
             replay_of: str | None) -> RunOutcome:
    """Takes what run_test takes and the run directory. Runs every phase, the controller's log
    in the run directory's harness.log. Returns the outcome (results unset)."""
    handler = attach_log(run_dir)
    try:
        log.info("run %s seed %s in %s", spec.name, spec.seed, run_dir)
        run = Run(spec, run_dir, observer)
        if replay_of is not None:
            run.test_info["replay_of"] = replay_of
        return run.execute()
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
