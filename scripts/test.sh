#!/usr/bin/env bash
# `make test`: the whole suite in two passes.
#  1. Everything without a cluster (unit and Spark tests) in two processes (pytest-xdist, a
#     module's tests kept together): a Spark check of a planted history waits on the JVM's
#     scheduling more than it computes, so two at once use two cores where one left one idle.
#     The modules go out in the order tests/conftest.py gives them, the long ones first
#     (--no-loadscope-reorder: xdist's own order, most tests first, left the minutes-long
#     modules of one or two tests to the end, run by one process while the other sat idle).
#  2. The integration tests, one at a time: they start real clusters, and only one cluster may
#     run on a machine at a time.
# Extra pytest arguments (PYTEST_ARGS) go to both passes. A pass that selects no tests is a
# failure unless the other pass ran some (a -k that picks only unit tests, say). Each pass lists
# its slowest tests at the end, so CI's output says where the suite's time goes.
set -uo pipefail
PY=${PY:-.venv/bin/python}
# Workers: TEST_WORKERS, else one a core, at least 2 and at most 4 (a worker's Spark JVM holds
# about 1.7 GB).
cores=$(nproc 2>/dev/null || echo 2)
WORKERS=${TEST_WORKERS:-$(( cores < 2 ? 2 : (cores > 4 ? 4 : cores) ))}

"$PY" -m pytest -q -n "$WORKERS" --dist loadfile --no-loadscope-reorder --durations=25 -m "not integration" "$@"
unit=$?
"$PY" -m pytest -q --durations=15 -m integration "$@"
integration=$?

if [ "$unit" -eq 5 ] && [ "$integration" -eq 5 ]; then
  echo "make test: pytest collected no tests" >&2
  exit 1
fi
failed() {  # the pass's name, its pytest exit: 0 and 5 (no tests here) pass
  if [ "$2" -ne 0 ] && [ "$2" -ne 5 ]; then
    echo "make test: the $1 pass failed (pytest exit $2)" >&2
    return 0
  fi
  return 1
}
if failed "unit and Spark" "$unit"; then exit "$unit"; fi
if failed integration "$integration"; then exit "$integration"; fi
exit 0
