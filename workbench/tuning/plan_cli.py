"""``workbench tune-plan``: several tuned models under one memory budget, from the shell.

    workbench tune -m digits_mlp --model-repository models --sla-ms 5 --json digits.json
    workbench tune -m minilm_encoder --model-repository models --sla-ms 80 --json minilm.json
    workbench tune-plan digits.json minilm.json --budget-mb 1024 [--json plan.json]

Reads each ``workbench tune --json`` result (its points, goals and measured memory per
instance), picks one setting per model that fits the budget with the highest combined
objective (:func:`workbench.tuning.budget.plan_budget`), and prints the plan with its
arithmetic. Exit status 0 with a plan, 1 when nothing fits or a result cannot be read, 2 on
bad flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.tuning.budget import options_from_json, plan_budget


def add_arguments(plan: argparse.ArgumentParser) -> None:
    """The flags of ``workbench tune-plan``."""
    plan.add_argument("results", nargs="+", metavar="RESULT.json",
                      help="results written by workbench tune --json, one per model")
    plan.add_argument("--budget-mb", type=float, required=True, metavar="MIB",
                      help="host memory the models' instances may take together, MiB")
    plan.add_argument("--json", default=None, metavar="OUT.json", help="write the plan as JSON")


def main(args: argparse.Namespace) -> int:
    """Run ``workbench tune-plan``; returns the exit status."""
    options = []
    for name in args.results:
        try:
            data = json.loads(Path(name).read_text())
            found = options_from_json(data)
        except (OSError, ValueError) as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 1
        if not found:
            print(f"error: {name}: no stable point meeting its goals with a memory figure "
                  f"({data.get('model')}: tune it again, in process or with --server-pid)", file=sys.stderr)
            return 1
        options.append(found)
    plan = plan_budget(options, args.budget_mb)
    print(plan.text())
    if args.json:
        Path(args.json).write_text(json.dumps(plan.as_dict(), indent=1))
    return 0 if plan.chosen else 1


__all__ = ["add_arguments", "main"]
