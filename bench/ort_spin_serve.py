"""workbench with ONNX Runtime thread spinning variants, next to the real Triton (issue 20, target 2).

    flock /tmp/bench.lock python3 bench/ort_spin_serve.py --round 1 --out DIR [--variants off,on,stop]
        [--ours-cmd '...'] [--no-raw]
    flock /tmp/bench.lock python3 bench/ort_spin_serve.py --round 2 --out DIR ...   # one locked run per round
    python3 bench/ort_spin_serve.py --table DIR                                       # medians over the rounds

One invocation is one round (about 3 min, so the benchmark lock is released between rounds); the rounds
append to DIR/results.json. A round, with nothing else of ours running:
1. numpy 64 MiB copy (GB/s) and in-process onnxruntime on minilm at batch 1,4,8,16,32 (../shared/bench/raw_ort.py,
   ORT's default spinning, --raw-seconds per batch): the machine's speed this minute and the "raw ORT best"
   ceiling (--no-raw skips it);
2. the servers, one after the other, the order rotating by round: ``triton`` (tritonserver 2.51 via
   ../shared/bench/tritonserver.sh on $BENCH_WORK/triton_py_repo: ORT inside its python backend, ORT's default
   spinning; minilm only) and one ``workbench serve`` per --variants entry, each on a copy of
   $BENCH_WORK/triton_repo's mlp and minilm whose configs add the variant's ``parameters`` (:data:`VARIANTS`;
   ``wb-cfg`` = the repository as it is, i.e. the backend's default);
   each gets minilm HTTP binary, minilm gRPC and (workbench) mlp HTTP binary at c=16 (vs_triton.py's
   ``measure``: a warm-up, then 3 windows x 3000 ms of perf_analyzer -b 1 with the harness's input data).
Ratios are taken inside a round; the table reports per-round values and the medians of the per-round ratios.
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
#: the side-by-side runner's helpers (servers, perf_analyzer, probes), loaded from this folder
vt: Any = importlib.import_module("vs_triton")

#: variant -> ORT session config entries added to both models' ``parameters`` (None: the repository as it is)
VARIANTS: dict[str, dict[str, str] | None] = {
    "cfg": None,
    "off": {"session.intra_op.allow_spinning": "0"},
    "on": {"session.intra_op.allow_spinning": "1"},
    "stop": {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1"},
    "spin200": {"session.intra_op.allow_spinning": "1", "session.intra_op.spin_duration_us": "200"},
}
MEASURES = [("minilm", "http"), ("minilm", "grpc"), ("mlp", "http")]
TRITON_PORTS = (8810, 8811, 8812)
OURS_PORTS = (8800, 8801, 8802)


def variant_repo(out: Path, variant: str) -> Path:
    """$BENCH_WORK/triton_repo's mlp and minilm (configs + a link to each ONNX file) with the variant's entries."""
    entries = VARIANTS[variant]
    if entries is None:
        return vt.WORK / "triton_repo"
    repo = out / f"repo_{variant}"
    extra = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in entries.items())
    for model in ("mlp", "minilm"):
        src = vt.WORK / "triton_repo" / model
        (repo / model / "1").mkdir(parents=True, exist_ok=True)
        (repo / model / "config.pbtxt").write_text((src / "config.pbtxt").read_text() + extra)
        link = repo / model / "1" / "model.onnx"
        if not link.exists():
            link.symlink_to((src / "1" / "model.onnx").resolve())
    return repo


def command(server: str, ours_cmd: str, out: Path) -> str:
    """The shell command that starts ``server`` on its ports with mlp and minilm loaded."""
    if server == "triton":
        return vt.server_command("triton", TRITON_PORTS, ["minilm"], ours_cmd, out)
    http, grpc, metrics = OURS_PORTS
    repo = variant_repo(out, server.removeprefix("wb-"))
    return (f"{ours_cmd} --model-repository={repo} --http-port={http} --grpc-port={grpc} "
            f"--metrics-port={metrics} --model-control-mode=explicit --load-model=mlp --load-model=minilm")


def one_round(a: argparse.Namespace) -> None:
    """Measure round ``a.round`` and append it to results.json."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
        "meta": {"machine": vt.machine(), "ours_cmd": a.ours_cmd, "ours_code": vt.code_version(a.ours_cmd)},
        "rounds": []}
    rdir = out / f"r{a.round}"
    rdir.mkdir(exist_ok=True)
    rnd: dict[str, Any] = {"round": a.round, "start_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                           "loadavg": vt.loadavg(), "measurements": []}
    try:
        rnd["numpy_copy_gb_per_s"] = json.loads(vt.run_json([vt.tools_python(), "-c", vt.NUMPY_COPY_PROBE], 60))[
            "gb_per_s"]
    except (OSError, ValueError, vt.subprocess.SubprocessError) as e:
        rnd["numpy_copy_error"] = str(e)
    if not a.no_raw:
        rnd["raw_ort_minilm"] = vt.raw_ort_minilm(rdir, "1,4,8,16,32", a.raw_seconds)
    servers = ["triton", *(f"wb-{v}" for v in a.variants.split(","))]
    res["meta"].setdefault("servers", servers)
    shift = (a.round - 1) % len(servers)
    opts = argparse.Namespace(windows=3, interval=3000)
    for server in servers[shift:] + servers[:shift]:
        ports = TRITON_PORTS if server == "triton" else OURS_PORTS
        models = ["minilm"] if server == "triton" else ["mlp", "minilm"]
        srv = vt.Server(server, command(server, a.ours_cmd, out), ports[0], models, rdir / f"{server}.server.log")
        try:
            srv.start()
            for model, proto in MEASURES:
                if model not in models:
                    continue
                port = ports[1 if proto == "grpc" else 0]
                rnd["measurements"].append(vt.measure(rdir, server, model, proto, 16, port, opts))
        except RuntimeError as e:
            rnd[f"{server}_error"] = str(e)
        finally:
            srv.stop()
    rnd["end_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    res["rounds"] = [r for r in res["rounds"] if r["round"] != a.round] + [rnd]
    path.write_text(json.dumps(res, indent=1))


def table(out: Path) -> str:
    """Markdown: per model/protocol and round, every server's infer/s, p99 and average batch, the ratios of each
    workbench variant to Triton, to the raw ORT best of the round (minilm) and to the first variant; then the
    medians (of the per-round values and of the per-round ratios) and the probes."""
    res = json.loads((out / "results.json").read_text())
    rounds = sorted(res["rounds"], key=lambda r: r["round"])
    servers: list[str] = res["meta"]["servers"]
    ours = [s for s in servers if s != "triton"]
    lines = [f"machine: {res['meta']['machine']}; code: {res['meta']['ours_code']}",
             "variants: " + "; ".join(f"{s} = {VARIANTS[s.removeprefix('wb-')] or 'the repository as it is'}"
                                      for s in ours), ""]
    for model, proto in MEASURES:
        shown = servers if model == "minilm" else ours
        head = [f"{s} infer/s" for s in shown] + [f"{s}/Triton" for s in ours if model == "minilm"]
        head += [f"{s}/raw" for s in ours if model == "minilm"] + [f"{s}/{ours[0]}" for s in ours[1:]]
        head += [f"p99 ms {' / '.join(shown)}", f"avg batch {' / '.join(shown)}"]
        if model == "minilm":
            head.insert(len(shown), "raw ORT best (batch)")
        lines += [f"#### {model}, {vt.PROTOCOLS[proto]}, c=16", "", "| round | " + " | ".join(head) + " |",
                  "|---|" + "---:|" * (len(head) - 2) + "---|---|"]
        columns: list[list[float]] = [[] for _ in head]
        for rnd in rounds:
            got = {m["server"]: m for m in rnd["measurements"]
                   if m["model"] == model and m["proto"] == proto and m.get("ok")}
            tp = {s: got[s]["infer_per_s"] if s in got else None for s in shown}
            raw = rnd.get("raw_ort_minilm") or {}
            best = raw.get("best") if model == "minilm" else None
            vals: list[float | None] = [tp[s] for s in shown]
            if model == "minilm":
                vals.append(best)
                vals += [vt.ratio(tp[s], tp["triton"]) for s in ours] + [vt.ratio(tp[s], best) for s in ours]
            vals += [vt.ratio(tp[s], tp[ours[0]]) for s in ours[1:]]
            cells = []
            for i, v in enumerate(vals):
                if v is not None:
                    columns[i].append(v)
                cells.append(vt.cell(v, 2 if _is_ratio(head[i]) else vt.tput_digits(v)))
            if model == "minilm" and best:
                cells[len(shown)] = f"{best:.1f} (b={raw['best_batch']})"
            cells.append(" / ".join(vt.cell(got[s]["p99_ms"] if s in got else None, 1) for s in shown))
            cells.append(" / ".join(vt.cell(got[s].get("avg_batch") if s in got else None, 1) for s in shown))
            lines.append(f"| {rnd['round']} | " + " | ".join(cells) + " |")
        meds = [vt.med(c) for c in columns[: len(head) - 2]]
        lines += ["| median | " + " | ".join(vt.cell(v, 2 if _is_ratio(h) else vt.tput_digits(v))
                                             for v, h in zip(meds, head, strict=False)) + " | | |", ""]
    lines += ["| round | start UTC | loadavg | numpy copy GB/s | raw ORT minilm infer/s per batch |",
              "|---|---|---|---:|---|"]
    for rnd in rounds:
        per = (rnd.get("raw_ort_minilm") or {}).get("per_batch") or {}
        lines.append(f"| {rnd['round']} | {rnd['start_utc']} | {rnd['loadavg']} | "
                     f"{vt.cell(rnd.get('numpy_copy_gb_per_s'), 2)} | "
                     + ", ".join(f"b{b}: {v:.1f}" for b, v in per.items()) + " |")
    return "\n".join(lines) + "\n"


def _is_ratio(column: str) -> bool:
    return "/" in column and not column.endswith("infer/s") and not column.startswith("raw")


def main() -> None:
    """Run one round, or print the table of a finished run (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round", type=int)
    ap.add_argument("--out")
    ap.add_argument("--ours-cmd", default=vt.default_ours_cmd())
    ap.add_argument("--raw-seconds", type=float, default=1.5)
    ap.add_argument("--variants", default="off,on,stop", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--no-raw", action="store_true", help="skip the in-process ORT batches")
    ap.add_argument("--table", metavar="DIR")
    a = ap.parse_args()
    if a.table:
        vt.save_tables(Path(a.table), table(Path(a.table)))
        return
    if a.round is None or a.out is None:
        ap.error("--round and --out are needed (or --table DIR)")
    one_round(a)


if __name__ == "__main__":
    main()
