"""workbench with ONNX Runtime thread spinning off vs on, next to the real Triton (issue 20, target 2).

    flock /tmp/bench.lock python3 bench/ort_spin_serve.py --round 1 --out DIR [--ours-cmd '...']
    flock /tmp/bench.lock python3 bench/ort_spin_serve.py --round 2 --out DIR ...   # one locked run per round
    python3 bench/ort_spin_serve.py --table DIR                                       # medians over the rounds

One invocation is one round (about 2.5 min, so the benchmark lock is released between rounds); the rounds
append to DIR/results.json. A round, with nothing else of ours running:
1. numpy 64 MiB copy (GB/s) and in-process onnxruntime on minilm at batch 1,4,8,16,32 (../shared/bench/raw_ort.py,
   ORT's default spinning, 2 s per batch): the machine's speed this minute and the "raw ORT best" ceiling;
2. three servers, one after the other, the order rotating by round: ``triton`` (tritonserver 2.51 via
   ../shared/bench/tritonserver.sh on $BENCH_WORK/triton_py_repo: ORT inside its python backend, ORT's default
   spinning), ``wb-off`` (``workbench serve`` on $BENCH_WORK/triton_repo as it is: our backend's default) and
   ``wb-on`` (the same, but a copy of the repository whose configs add
   ``parameters { key: "session.intra_op.allow_spinning" value: { string_value: "1" } }``);
   each gets minilm HTTP binary, minilm gRPC and mlp HTTP binary at c=16 (vs_triton.py's ``measure``: a warm-up,
   then 3 windows x 3000 ms of perf_analyzer -b 1 with the harness's input data).
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

SPIN_PARAM = 'parameters { key: "session.intra_op.allow_spinning" value: { string_value: "1" } }\n'
MEASURES = [("minilm", "http"), ("minilm", "grpc"), ("mlp", "http")]
SERVERS = ("triton", "wb-off", "wb-on")
PORTS = {"triton": (8810, 8811, 8812), "wb-off": (8800, 8801, 8802), "wb-on": (8800, 8801, 8802)}


def spin_repo(out: Path) -> Path:
    """A copy of $BENCH_WORK/triton_repo's mlp and minilm (configs + a link to each ONNX file) with spinning on."""
    repo = out / "repo_spin_on"
    for model in ("mlp", "minilm"):
        src = vt.WORK / "triton_repo" / model
        (repo / model / "1").mkdir(parents=True, exist_ok=True)
        (repo / model / "config.pbtxt").write_text((src / "config.pbtxt").read_text() + SPIN_PARAM)
        link = repo / model / "1" / "model.onnx"
        if not link.exists():
            link.symlink_to((src / "1" / "model.onnx").resolve())
    return repo


def command(server: str, ours_cmd: str, out: Path) -> str:
    """The shell command that starts ``server`` on its ports with mlp and minilm loaded."""
    http, grpc, metrics = PORTS[server]
    if server == "triton":
        return vt.server_command("triton", PORTS[server], ["mlp", "minilm"], ours_cmd, out)
    repo = vt.WORK / "triton_repo" if server == "wb-off" else spin_repo(out)
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
    rnd["raw_ort_minilm"] = vt.raw_ort_minilm(rdir, "1,4,8,16,32", a.raw_seconds)
    shift = (a.round - 1) % len(SERVERS)
    opts = argparse.Namespace(windows=3, interval=3000)
    for server in SERVERS[shift:] + SERVERS[:shift]:
        srv = vt.Server(server, command(server, a.ours_cmd, out), PORTS[server][0], ["mlp", "minilm"],
                        rdir / f"{server}.server.log")
        try:
            srv.start()
            for model, proto in MEASURES:
                port = PORTS[server][1 if proto == "grpc" else 0]
                rnd["measurements"].append(vt.measure(rdir, server, model, proto, 16, port, opts))
        except RuntimeError as e:
            rnd[f"{server}_error"] = str(e)
        finally:
            srv.stop()
    rnd["end_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    res["rounds"] = [r for r in res["rounds"] if r["round"] != a.round] + [rnd]
    path.write_text(json.dumps(res, indent=1))


def table(out: Path) -> str:
    """Markdown: per model/protocol the per-round infer/s, p99 and avg batch of the three servers, and ratios."""
    res = json.loads((out / "results.json").read_text())
    rounds = sorted(res["rounds"], key=lambda r: r["round"])
    lines = [f"machine: {res['meta']['machine']}; code: {res['meta']['ours_code']}", ""]
    for model, proto in MEASURES:
        lines += [f"#### {model}, {vt.PROTOCOLS[proto]}, c=16", "",
                  "| round | Triton infer/s | wb-off infer/s | wb-on infer/s | off/Triton | on/Triton | on/off |"
                  " raw ORT best (batch) | off/raw | on/raw | p99 ms T / off / on | avg batch T / off / on |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        cols: dict[str, list[float]] = {k: [] for k in ("t", "off", "on", "ot", "nt", "no", "or", "nr")}
        for rnd in rounds:
            got = {m["server"]: m for m in rnd["measurements"]
                   if m["model"] == model and m["proto"] == proto and m.get("ok")}
            tp = {s: got[s]["infer_per_s"] if s in got else None for s in SERVERS}
            raw = rnd.get("raw_ort_minilm") or {}
            best = raw.get("best") if model == "minilm" else None
            vals = {"t": tp["triton"], "off": tp["wb-off"], "on": tp["wb-on"],
                    "ot": vt.ratio(tp["wb-off"], tp["triton"]), "nt": vt.ratio(tp["wb-on"], tp["triton"]),
                    "no": vt.ratio(tp["wb-on"], tp["wb-off"]), "or": vt.ratio(tp["wb-off"], best),
                    "nr": vt.ratio(tp["wb-on"], best)}
            for k, v in vals.items():
                if v is not None:
                    cols[k].append(v)
            d = vt.tput_digits(tp["triton"])
            p99 = " / ".join(vt.cell(got[s]["p99_ms"] if s in got else None, 1) for s in SERVERS)
            batch = " / ".join(vt.cell(got[s].get("avg_batch") if s in got else None, 1) for s in SERVERS)
            bestcell = f"{best:.1f} (b={raw['best_batch']})" if best else "-"
            lines.append(f"| {rnd['round']} | {vt.cell(vals['t'], d)} | {vt.cell(vals['off'], d)} | "
                         f"{vt.cell(vals['on'], d)} | {vt.cell(vals['ot'], 2)} | {vt.cell(vals['nt'], 2)} | "
                         f"{vt.cell(vals['no'], 2)} | {bestcell} | {vt.cell(vals['or'], 2)} | "
                         f"{vt.cell(vals['nr'], 2)} | {p99} | {batch} |")
        m = {k: vt.med(v) for k, v in cols.items()}
        d = vt.tput_digits(m["t"])
        lines += [f"| median | {vt.cell(m['t'], d)} | {vt.cell(m['off'], d)} | {vt.cell(m['on'], d)} | "
                  f"{vt.cell(m['ot'], 2)} | {vt.cell(m['nt'], 2)} | {vt.cell(m['no'], 2)} | | "
                  f"{vt.cell(m['or'], 2)} | {vt.cell(m['nr'], 2)} | | |", ""]
    lines += ["| round | start UTC | loadavg | numpy copy GB/s | raw ORT minilm infer/s per batch |",
              "|---|---|---|---:|---|"]
    for rnd in rounds:
        per = (rnd.get("raw_ort_minilm") or {}).get("per_batch") or {}
        lines.append(f"| {rnd['round']} | {rnd['start_utc']} | {rnd['loadavg']} | "
                     f"{vt.cell(rnd.get('numpy_copy_gb_per_s'), 2)} | "
                     + ", ".join(f"b{b}: {v:.1f}" for b, v in per.items()) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run one round, or print the table of a finished run (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round", type=int)
    ap.add_argument("--out")
    ap.add_argument("--ours-cmd", default=vt.default_ours_cmd())
    ap.add_argument("--raw-seconds", type=float, default=2.0)
    ap.add_argument("--table", metavar="DIR")
    a = ap.parse_args()
    if a.table:
        text = table(Path(a.table))
        (Path(a.table) / "tables.md").write_text(text)
        print(text)
        return
    if a.round is None or a.out is None:
        ap.error("--round and --out are needed (or --table DIR)")
    one_round(a)


if __name__ == "__main__":
    main()
