"""Pages and pictures of what runs stored: the run report, the store index, matrix and nightly
pages, the plots.

Everything here reads what a run or a campaign left in the store (test.json, results.json,
history.jsonl, harness.log, nodes/<node>/, matrix.json) and never imports workloads/,
nemesis/ or clusters/: a stored run is reported again without a cluster and without the code
that ran it. The harness's CLI calls it; its pages come from templates with autoescaping.
"""
