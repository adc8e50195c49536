"""The pieces of ``benchmarks/peers.py``: poolkit and the pools a user would pick instead, on the
same workloads in one process (see docs/benchmarks.md).

* ``core``: what a workload, a contender and a run's figures are; medians, ranges, ratios.
* ``drive``: the contention harness (tasks or threads for a time), and the figures it takes.
* ``servers``: the PostgreSQL and Redis servers: reachable?, versions, connections counted.
* ``pg_rows`` / ``redis_rows``: the server workloads and every pool on them.
* ``null_rows``: the workloads over null connections (W1, W2, W5).
* ``storm`` (W7) and ``outage`` (W8).
* ``report``, ``plot``, ``machine``: what is printed and written.
"""
