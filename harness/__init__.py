"""The controller: test specs, run phases, history, store, reports and the CLI (python -m harness)."""
