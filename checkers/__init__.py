"""Checkers over histories: Spark jobs for queue totals, ordering, availability and latency, plus a pure-Python reference."""
