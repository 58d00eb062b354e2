"""perf_analyzer `-f X.csv --verbose-csv` files -> one markdown table (stdout).

    python bench/table.py DIR/<model>__<format>__c<N>.cmd ...     (one per run; reads the .csv next to it)

Latencies in the CSV are microseconds; the table shows milliseconds.
"""

from __future__ import annotations

import csv
import os
import sys

COLUMNS = [("p50 latency", "p50 ms"), ("p99 latency", "p99 ms"), ("Server Queue", "queue ms"),
           ("Server Compute Input", "compute in ms"), ("Server Compute Infer", "compute infer ms"),
           ("Server Compute Output", "compute out ms")]


def main(paths: list[str]) -> None:
    rows = []
    for path in paths:
        base = os.path.splitext(path)[0]
        model, fmt, conc = os.path.basename(base).split("__")
        try:
            with open(base + ".csv") as f:
                last = list(csv.DictReader(f))[-1]
        except (OSError, IndexError):
            rows.append((model, fmt, int(conc[1:]), "FAILED", ["-"] * len(COLUMNS)))
            continue
        cells = [f"{float(last[k]) / 1000:.2f}" if last.get(k) not in (None, "") else "-" for k, _ in COLUMNS]
        rows.append((model, fmt, int(conc[1:]), f"{float(last['Inferences/Second']):.0f}", cells))
    print("| model | format | conc | infer/s | " + " | ".join(h for _, h in COLUMNS) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(COLUMNS))
    for model, fmt, concurrency, tput, cells in sorted(rows, key=lambda r: r[:3]):
        print(f"| {model} | {fmt} | {concurrency} | {tput} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
