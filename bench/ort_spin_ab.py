"""ONNX Runtime spinning variants A/B inside ONE workbench server (issue 20, target 2: deciding the default).

    flock /tmp/bench.lock python3 bench/ort_spin_ab.py --out DIR --rounds 2 [--first-round 1]
        [--variants off,on,stop] [--ours-cmd '...']     # one locked run = --rounds rounds (~90 s each)
    python3 bench/ort_spin_ab.py --table DIR

On this shared 2-core VM other people's work comes in bursts of tens of seconds, so comparing servers started
minutes apart mostly measures the bursts. Here one ``workbench serve`` loads every variant of mlp and minilm as
its own model (``mlp_off``, ``minilm_on``, ...: copies of $BENCH_WORK/triton_repo's configs, renamed, plus the
variant's ORT session config entries, :data:`ort_spin_serve.VARIANTS`; same ONNX files), and perf_analyzer
alternates between them every few seconds: per round, for minilm over HTTP binary and gRPC, then mlp over HTTP
binary, each variant in turn (the order rotating by round), c=16, a warm-up of 3 x 1 s then 3 windows x
2000 ms (perf_analyzer needs 3 for its stability bookkeeping). An idle variant's threads are blocked (ORT
spins only for a while after a run), so the variants do not disturb each other. Results append to
DIR/results.json (rounds numbered from --first-round); --table prints per round and the medians of the
per-round ratios to the first variant.
Standard library only (python3 >= 3.10).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: the side-by-side runners' helpers, loaded from this folder
vt: Any = importlib.import_module("vs_triton")
spin: Any = importlib.import_module("ort_spin_serve")

MEASURES = [("minilm", "http"), ("minilm", "grpc"), ("mlp", "http")]
PORTS = (8800, 8801, 8802)


def ab_repo(out: Path, variants: list[str]) -> Path:
    """One repository with ``<model>_<variant>`` for mlp and minilm and every variant."""
    repo = out / "repo_ab"
    for model in ("mlp", "minilm"):
        src = vt.WORK / "triton_repo" / model
        text = (src / "config.pbtxt").read_text()
        for variant in variants:
            entries = spin.VARIANTS[variant] or {}
            name = f"{model}_{variant}"
            (repo / name / "1").mkdir(parents=True, exist_ok=True)
            extra = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
                            for k, v in entries.items())
            (repo / name / "config.pbtxt").write_text(
                text.replace(f'name: "{model}"', f'name: "{name}"', 1) + extra)
            link = repo / name / "1" / "model.onnx"
            if not link.exists():
                link.symlink_to((src / "1" / "model.onnx").resolve())
    return repo


_pa_command = vt.pa_command


def pa_command(model: str, *args: Any, **kwargs: Any) -> list[str]:
    """vs_triton's perf_analyzer argv, with the input data of the base model (``minilm`` for ``minilm_on``)."""
    argv = _pa_command(model, *args, **kwargs)
    data = str(vt.WORK / "data" / f"{model}.json")
    base = str(vt.WORK / "data" / f"{model.rsplit('_', 1)[0]}.json")
    return [base if x == data else x for x in argv]


vt.pa_command = pa_command  # vs_triton.measure looks it up at call time


def run(a: argparse.Namespace) -> None:
    """--rounds rounds inside one server; appends them to results.json."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = a.variants.split(",")
    path = out / "results.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
        "meta": {"machine": vt.machine(), "ours_cmd": a.ours_cmd, "ours_code": vt.code_version(a.ours_cmd),
                 "variants": variants}, "rounds": []}
    repo = ab_repo(out, variants)
    models = [f"{m}_{v}" for m in ("mlp", "minilm") for v in variants]
    http, grpc, metrics = PORTS
    cmd = (f"{a.ours_cmd} --model-repository={repo} --http-port={http} --grpc-port={grpc} "
           f"--metrics-port={metrics} --model-control-mode=explicit" + "".join(f" --load-model={m}" for m in models))
    srv = vt.Server("workbench", cmd, http, models, out / f"server.r{a.first_round}.log")
    opts = argparse.Namespace(windows=3, interval=2000)
    try:
        srv.start()
        for r in range(a.first_round, a.first_round + a.rounds):
            rdir = out / f"r{r}"
            rdir.mkdir(exist_ok=True)
            rnd: dict[str, Any] = {"round": r, "start_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                                   "loadavg": vt.loadavg(), "measurements": []}
            shift = (r - 1) % len(variants)
            for model, proto in MEASURES:
                for variant in variants[shift:] + variants[:shift]:
                    m = vt.measure(rdir, variant, f"{model}_{variant}", proto, 16, grpc if proto == "grpc" else http,
                                   opts)
                    m["model"] = model
                    rnd["measurements"].append(m)
            res["rounds"] = [x for x in res["rounds"] if x["round"] != r] + [rnd]
            path.write_text(json.dumps(res, indent=1))
    finally:
        srv.stop()


def table(out: Path) -> str:
    """Markdown: per model/protocol and round, each variant's infer/s, p99, avg batch and ratio to the first."""
    res = json.loads((out / "results.json").read_text())
    variants: list[str] = res["meta"]["variants"]
    rounds = sorted(res["rounds"], key=lambda r: r["round"])
    lines = [f"machine: {res['meta']['machine']}; code: {res['meta']['ours_code']}",
             "variants: " + "; ".join(f"{v} = {spin.VARIANTS[v] or 'the repository as it is'}" for v in variants), ""]
    for model, proto in MEASURES:
        head = ([f"{v} infer/s" for v in variants] + [f"{v}/{variants[0]}" for v in variants[1:]]
                + [f"p99 ms {' / '.join(variants)}", f"avg batch {' / '.join(variants)}", "loadavg"])
        lines += [f"#### {model}, {vt.PROTOCOLS[proto]}, c=16 (one server)", "", "| round | " + " | ".join(head) + " |",
                  "|---|" + "---:|" * (2 * len(variants) - 1) + "---|---|---|"]
        cols: list[list[float]] = [[] for _ in range(2 * len(variants) - 1)]
        for rnd in rounds:
            got = {m["server"]: m for m in rnd["measurements"]
                   if m["model"] == model and m["proto"] == proto and m.get("ok")}
            tp = [got[v]["infer_per_s"] if v in got else None for v in variants]
            vals = tp + [vt.ratio(t, tp[0]) for t in tp[1:]]
            for c, v in zip(cols, vals, strict=True):
                if v is not None:
                    c.append(v)
            cells = [vt.cell(v, vt.tput_digits(v)) for v in tp] + [vt.cell(v, 2) for v in vals[len(tp):]]
            cells.append(" / ".join(vt.cell(got[v]["p99_ms"] if v in got else None, 1) for v in variants))
            cells.append(" / ".join(vt.cell(got[v].get("avg_batch") if v in got else None, 1) for v in variants))
            cells.append(rnd["loadavg"])
            lines.append(f"| {rnd['round']} | " + " | ".join(cells) + " |")
        meds = [vt.med(c) for c in cols]
        lines += ["| median | " + " | ".join(vt.cell(v, vt.tput_digits(v)) for v in meds[: len(variants)]) + " | "
                  + " | ".join(vt.cell(v, 2) for v in meds[len(variants):]) + " | | | |", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run rounds, or print the table of a finished run (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--first-round", type=int, default=1)
    ap.add_argument("--variants", default="off,on,stop")
    ap.add_argument("--ours-cmd", default=vt.default_ours_cmd())
    ap.add_argument("--table", metavar="DIR")
    a = ap.parse_args()
    if a.table:
        vt.save_tables(Path(a.table), table(Path(a.table)))
        return
    if a.out is None:
        ap.error("--out is needed (or --table DIR)")
    run(a)


if __name__ == "__main__":
    main()
