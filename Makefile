# The two commands users need: `make test-partition` (the main job) and `make test` (the suite).
# Every target that needs the environment runs `setup` first; setup is idempotent.
PY := .venv/bin/python
SCENARIOS := partition healthy kill pause quorum-leader-partition quorum-leader-partition-returns \
             quorum-ignore \
             quorum-majorities-ring quorum-rolling-restart quorum-packet-loss quorum-sac-fifo \
             quorum-crashing-consumers stream-partition khepri-minority khepri-minority-leader \
             quorum-delayed-retry quorum-delayed-retry-healthy \
             quorum-delayed-retry-leader-partition quorum-delayed-retry-khepri-minority \
             quorum-consumer-timeout quorum-consumer-timeout-healthy \
             quorum-consumer-timeout-leader-kill quorum-consumer-timeout-khepri-minority \
             quorum-consumer-timeout-sac quorum-consumer-timeout-sac-healthy \
             quorum-consumer-timeout-close quorum-consumer-timeout-close-healthy \
             quorum-priorities quorum-priorities-healthy \
             quorum-priorities-leader-partition quorum-priorities-khepri-minority \
             mirrored-master-partition \
             quorum-autoheal-leader-partition mirrored-ignore-split-brain mirrored-partition \
             mirrored-pause-minority mirrored-unsynced-promotion mirrored-synced-promotion \
             mirrored-manual-sync-rejoin quorum-followers-restart transient-node-restart \
             nondurable-node-restart durable-node-restart transient-full-restart \
             durable-full-restart durable-graceful-restart quorum-power-loss-minority \
             quorum-power-loss-majority quorum-power-loss-all classic-power-loss-node classic-power-loss-all \
             stream-power-loss-minority stream-power-loss-all quorum-disk-corrupt-minority \
             quorum-disk-corrupt-leader-truncate
RUN_ARGS ?=

.PHONY: setup test test-unit test-integration test-partition $(addprefix test-,$(filter-out partition,$(SCENARIOS))) \
        scenarios matrix bench bench-workload bench-cluster lint clean check report serve

setup:
	@bash scripts/setup.sh

# The whole suite: unit and Spark tests in two processes, then the real-cluster integration
# tests one at a time (scripts/test.sh). No test collected at all is a failure.
test: setup
	@PY=$(PY) bash scripts/test.sh $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -q -m "not integration and not spark" $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest -q -m integration $(PYTEST_ARGS)

# One target per named scenario: make test-partition, make test-kill, make test-pause, ...
$(addprefix test-,$(SCENARIOS)): test-%: setup
	$(PY) -m harness run --scenario $* $(RUN_ARGS)

# The scenario matrix (nightly CI): every scenario in turn, a table of verdicts against expectations.
# Exit 0: all as expected; 1: a scenario expected safe lost something; 2: an unknown verdict.
matrix: setup
	$(PY) -m harness matrix $(if $(SCENARIO_LIST),--scenarios $(SCENARIO_LIST)) $(RUN_ARGS)

# The nightly matrix (CI: .github/workflows/nightly.yml): every scenario with its safe twin, as
# many as fit in NIGHTLY_BUDGET minutes (no run starts that is expected to end past it; the rest are
# skipped); NIGHTLY_SCENARIOS=a,b for a few. Infrastructure failures are retried once. Writes
# junit.xml and index.html beside matrix.json in store/matrix/<time>/.
# Exit 0: all as expected; 1: a finding; 2: unknown, insensitive or an infrastructure error.
NIGHTLY_BUDGET ?= 60
NIGHTLY_SCENARIOS ?=
.PHONY: nightly
nightly: setup
	$(PY) -m harness nightly --budget $(NIGHTLY_BUDGET) $(if $(NIGHTLY_SCENARIOS),--scenarios $(NIGHTLY_SCENARIOS)) $(RUN_ARGS)

# The Debian 13 root filesystem RabbitMQ 4.0 nodes will run from (issue 20): built once into
# .state/rootfs/, rebuilt only when scripts/rootfs/rabbitmq-4.0.recipe changes (~1 min, 232 MB).
.PHONY: rootfs
rootfs: setup
	@bash scripts/build-rootfs.sh 4.0

scenarios: setup
	@$(PY) -m harness scenarios

check: setup
	$(PY) -m harness check $(or $(RUN),store/latest)

report: setup
	$(PY) -m harness report $(or $(RUN),store/latest)

# Serves the store (its index.html lists every run) on localhost only: make serve [SERVE_PORT=8000].
SERVE_PORT ?= 8000
serve: setup
	@mkdir -p store
	$(PY) -m reports.index store
	$(PY) -m http.server $(SERVE_PORT) --bind 127.0.0.1 --directory store

# The checker on synthetic histories, then the workload against raw pika on a real cluster.
bench: setup
	$(PY) -m bench.checker $(BENCH_ARGS)
	$(PY) -m bench.workload $(WORKLOAD_BENCH_ARGS)

bench-workload: setup
	$(PY) -m bench.workload $(WORKLOAD_BENCH_ARGS)

# Cluster-ready time, phase by phase, on each release line (root: namespaces; nothing else may run
# a cluster meanwhile).
bench-cluster: setup
	$(PY) -m bench.cluster $(CLUSTER_BENCH_ARGS)

# The power-loss layer against the plain directory: 4 KiB appends, an fsync every N (root, /dev/fuse).
.PHONY: bench-lazyfs
bench-lazyfs: setup
	$(PY) -m bench.lazyfs $(LAZYFS_BENCH_ARGS)

# What the layer costs a real run: healthy without and with --unsynced-fs, alternating
# (bench/lazyfs_run.py), e.g. LAZYFS_RUN_BENCH_ARGS="--rounds 3 --rate 600 --json out.json".
.PHONY: bench-lazyfs-run
bench-lazyfs-run: setup
	$(PY) -m bench.lazyfs_run $(LAZYFS_RUN_BENCH_ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy history harness workloads nemesis checkers reports clusters bench
	$(PY) -m vulture history harness workloads nemesis checkers reports clusters bench \
	  scripts/vulture_whitelist.py --min-confidence 60

# Removes whatever a run left (namespaces, links, broker processes by pid, broker data).
clean:
	@if [ -x $(PY) ]; then $(PY) -m harness clean; else echo "nothing to clean (no .venv)"; fi
