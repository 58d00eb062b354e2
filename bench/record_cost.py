"""Cost of recording one request in the engine's statistics (``ModelStatistics.record_success``
and ``record_execution``), ns per call: the request path's share of the statistics.

Run against two checkouts to compare (issue 32 part 4: the duration histograms and formed batch
sizes add a bisect and an increment per histogram)::

    PYTHONPATH=/work/main python bench/record_cost.py      # before
    PYTHONPATH=. python bench/record_cost.py               # after
"""

from __future__ import annotations

import statistics
import timeit

from workbench.stats.statistics import ModelStatistics

CALLS = 200_000


def main() -> None:
    stats = ModelStatistics("m", "1")
    success = [timeit.timeit(lambda: stats.record_success(1_500_000, 200_000, 30_000, 900_000, 20_000),
                             number=CALLS) / CALLS * 1e9 for _ in range(15)]
    execution = [timeit.timeit(lambda: stats.record_execution(4, 30_000, 900_000, 20_000),
                               number=CALLS) / CALLS * 1e9 for _ in range(15)]
    for name, runs in (("record_success  ", success), ("record_execution", execution)):
        print(f"{name} {min(runs):6.0f} ns/call (best of 15 x {CALLS}; median {statistics.median(runs):.0f})")


if __name__ == "__main__":
    main()
