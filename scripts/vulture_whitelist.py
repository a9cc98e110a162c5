"""Names `vulture` (make lint, --min-confidence 60) reports unused that are used, by name.

Each line names what vulture cannot see. A name here that the code no longer has is harmless,
but remove it: the list should say what is used and why. Everything else vulture reports is
dead and goes (issue 22).
"""

# Called by a library, not by us: paramiko's host-key policy, Jinja2's extension hook.
_.missing_host_key  # clusters/ssh/hostkeys.py: paramiko.MissingHostKeyPolicy
_.preprocess  # reports/html.py: jinja2.ext.Extension
filename  # reports/html.py: jinja2.ext.Extension.preprocess's parameter
exc  # history/__init__.py: HistoryWriter.__exit__'s parameters
# clusters/lazyfs/fs.py: pyfuse3 calls the handlers and reads these attributes by name.
_.opendir
_.readdir
_.releasedir
_.fsyncdir
_.statfs
_.attr_timeout
_.entry_timeout
supports_dot_lookup
enable_writeback_cache
_.advance  # clusters/lazyfs/handle.py: LazyFS.advance drives a --clock manual daemon (its tests)

# Fields the templates read by name (reports/templates/, the shrink page).
swatch  # reports/html.py
codes  # reports/html.py
badge  # reports/html.py
checks  # reports/report.py, templates/report/banner.html.j2
none  # reports/report_results.py, templates/report/anomalies.html.j2
no_record  # reports/report_run.py, templates/report/faults.html.j2
nothing  # reports/report_run.py, templates/report/faults.html.j2
settings_count  # reports/report_run.py, templates/report/test.html.j2
no_log  # reports/report_strength.py, templates/report/incidents.html.j2
promises_false  # reports/report_results.py, templates/report/anomalies.html.j2
told_apart  # reports/report_results.py, templates/report/anomalies.html.j2
memory_source  # reports/report_health.py, templates/report/health.html.j2
_.changed  # the shrink page's template

# Fields of records serialised whole (dataclasses.asdict into matrix.json, test.json, status).
weak_reason  # harness/matrix.py: a matrix row's, read back as row["weak_reason"]
depth_age_s  # harness/progress.py: the live status's
dead_letter  # workloads/queue_workload.py: the drain report's
_.dead_letter

# The bounded history scan counts what it kept and what it dropped.
depth_seen  # reports/history_scan.py
events_dropped
_.depth_seen
_.events_dropped

# Public readers and test support the tests use (no production caller).
read_history  # history: the contract's small-history reader
dockerd_running  # clusters/docker/dockerd.py: tests and README's by-hand set-up
top_reasons  # checkers/results.py: the order checkers/spark_queue.py follows, stated once
explain  # harness/explain.py: tell() over a history file; check.py tells from Spark traces
_latency_table  # reports/report.py: one section drawn alone, for the tests
counts_section  # reports/report_results.py: idem
anomalies_section
other_checks_section
faults_section  # reports/report_run.py: idem

# pyspark's own class attribute, reset so that the next session starts a new JVM.
_._jvm  # checkers/class_archive.py: SparkContext._jvm

# Issue 31: a consumer's count of rejects and nacks (the tests and bench read it); whether a
# release line cancels a timed-out consumer (read by the scenarios' predictions, the record's).
_.returned
_.timeout_cancels
