"""`workbench tune` next to NVIDIA's Triton Model Analyzer on the same model, search space and SLA
(issue 31's side by side), the two tools alternating in one sitting.

    python bench/tune_vs_model_analyzer.py [--rounds 1] [--models digits_mlp,minilm_encoder,text_embedder]
        [--sla-ms digits_mlp=8,minilm_encoder=150] [--sides ma,workbench] [--out DIR]
        [--sample-repository sample_models/repository] [--tools .venv-production/model-analyzer]
    python bench/tune_vs_model_analyzer.py --tables-only DIR     # rebuild DIR/tables.md from DIR/results.json
    make bench-tune BENCH_TUNE_ARGS="--rounds 2"

The tools: ``model-analyzer`` (triton-model-analyzer 1.58, PyPI) and the real ``perf_analyzer`` (the
tritonclient 2.41 wheel's binary) from ``scripts/model_analyzer_env.sh`` (built into --tools when missing;
perf_analyzer needs Debian's libb64-0d); ``workbench tune`` from this checkout (--tune-cmd). Nothing
upstream is committed: the venv is made at run time.

The search space, the same for both (SPACE): KIND_CPU instance count 1-2, max batch size 1, 2, 4, 8, 16
with dynamic batching on, concurrency 1, 2, 4, 8, 16; objective throughput under a p99 latency SLA.
The SLA per model (--sla-ms, or calibrated): p99 of the sample configuration at concurrency 1
(perf_analyzer gRPC, 3 windows of 2 s) times SLA_FACTOR, rounded up to two significant digits.

Every round, per model, first Model Analyzer then ``workbench tune`` (rounds make ABAB), each on a fresh
``workbench serve --model-control-mode=explicit`` over a copy of the model's folders (composing models
included), each preceded by a machine-speed probe (a fixed single-threaded numpy matmul loop, loadavg):

* Model Analyzer: ``model-analyzer profile`` in remote mode with the bounds above,
  ``constraints: {perf_latency_p99: {max: SLA}}``, ``objectives: perf_throughput``, its perf_analyzer with
  MA_PA_FLAGS (1 s time windows, stability 50 %: this machine is noisy) and
  ``perf_analyzer_max_auto_adjusts: 3``, a fresh export folder (so no checkpoint is reused). A plain model
  is searched in brute mode (--ma-mode): 1.58's quick mode with ``run_config_search_max_instance_count``
  clamps the instance count instead of bounding it and can step past the bound onto the same
  configuration again and again without end (it did on digits_mlp with a 6.1 ms SLA; LOOP_LIMIT stops
  such a run with SIGINT), and it refuses a listed instance count for a top-level model. An ensemble
  is searched in quick mode (1.58 has no other for ensembles): the composing models' instance counts
  (listed: 1, 2) and max batch sizes, the ensemble's max batch size set to their minimum, then a
  concurrency sweep over its top 3. Measured: wall time from
  process start to its "Profile complete" line (and to exit, reports included), perf_analyzer runs (a
  counting wrapper), the measurements in its checkpoint, its top configuration under the constraint
  (the passing measurement of highest throughput; the summary's sentence kept beside it).
* ``workbench tune -u <grpc> -i grpc`` with the same space (an ensemble's: ``step/knob`` for each
  composing model), SLA, objective, input data, 1 s windows and 50 % stability (``--json``;
  ``--tune-cmd api``: :func:`workbench.tuning.tune` with the same arguments, called by this script in a
  process of its own, as before the CLI landed). Measured: wall time, points and windows measured, the
  chosen setting.

Then each recommendation is measured the same neutral way: a fresh ``workbench serve`` over a copy of the
repository whose config.pbtxt files are the recommended ones, perf_analyzer (the real one) over gRPC at
concurrency 1, 2, 4, 8, 16 (NEUTRAL_PA: 3 windows of 2 s after a warm-up), the best throughput whose p99
meets the SLA; beside it the server's CPU time (its process tree, /proc) per inference (its statistics).

Output (--out, default /tmp/tune_vs_ma/<UTC time>): results.json (written as it goes), tables.md (printed
at the end), one folder per run with the tools' files, logs and perf_analyzer CSVs. Timing is never
pass/fail here.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import html
import importlib
import json
import math
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("ma", "workbench")
SIDE_NAMES = {"ma": "model-analyzer", "workbench": "workbench tune"}
MODELS = ("digits_mlp", "minilm_encoder", "text_embedder")
#: the search space both tools get
INSTANCE_COUNTS = (1, 2)
MAX_BATCH_SIZES = (1, 2, 4, 8, 16)
CONCURRENCIES = (1, 2, 4, 8, 16)
SPACE = "instance_count=1,2 max_batch_size=1,2,4,8,16 dynamic_batching=true"
SLA_FACTOR = 5.0
#: minilm_encoder's inputs: 32 tokens (bench/make_inputs.py pads its sentences to that)
MINILM_SHAPES = tuple(f"{name}:32" for name in ("input_ids", "attention_mask", "token_type_ids"))
#: perf_analyzer flags Model Analyzer passes on every measurement (issue 21: 50 % because this VM is noisy)
MA_PA_FLAGS: dict[str, object] = {"measurement-mode": "time_windows", "measurement-interval": 1000,
                                  "stability-percentage": 50}
MA_MAX_AUTO_ADJUSTS = 3
#: workbench tune's window (ms) and stability threshold (%), as Model Analyzer's perf_analyzer gets
TUNE_INTERVAL_MS = 1000
TUNE_STABILITY = 50.0
#: the neutral measurement: fixed windows, no stability wait
NEUTRAL_PA = ["--measurement-mode", "time_windows", "-p", "2000", "-s", "999", "-r", "3", "--percentile", "99"]
WARMUP_PA = ["--measurement-mode", "time_windows", "-p", "1000", "-s", "999", "-r", "3"]
TOOL_TIMEOUT_S = 1500
#: lines of a repeated message, with no progress between them, after which a tool is taken to loop
LOOP_LIMIT = 200
MATMUL_PROBE = """
import json, time
import numpy as np
a = np.random.default_rng(0).random((256, 256), dtype=np.float32); b = a.copy()
def loop():
    t0 = time.perf_counter()
    for _ in range(200):
        np.matmul(a, b)
    return time.perf_counter() - t0
print(json.dumps({"matmul_ms": round(min(loop() for _ in range(5)) * 1e3, 2)}))
"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the machine


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def speed_probe() -> dict[str, Any]:
    """200 single-threaded 256x256 float32 matmuls, best of 5 (ms), and the load average."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    probe: dict[str, Any] = {"time_utc": time.strftime("%H:%M:%S", time.gmtime()), "loadavg": loadavg()}
    run = subprocess.run([sys.executable, "-c", MATMUL_PROBE], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    if run.returncode == 0:
        probe.update(json.loads(run.stdout))
    else:
        probe["error"] = run.stderr[-500:]
    return probe


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return f"{os.cpu_count()} vCPU {model}, {mem_kib / 2**20:.0f} GiB"


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its live descendants, plus the children
    it has reaped (``/proc/PID/stat``)."""
    return sum(proc_cpu.tree_cpu_s(pid))


# ---------------------------------------------------------------- repositories and servers


def composing_models(sample: Path, model: str) -> list[str]:
    """The models ``model``'s ensemble steps name (none for a plain model)."""
    text = (sample / model / "config.pbtxt").read_text()
    return list(dict.fromkeys(re.findall(r'model_name:\s*"([^"]+)"', text)))


def make_repository(sample: Path, model: str, out: Path, configs: dict[str, str] | None = None) -> Path:
    """``out`` holding copies of ``model``'s folder and its composing models' (Model Analyzer and
    the tuner read them; the sample repository is never written), with ``configs`` (model name ->
    config.pbtxt text) replacing the sample ones."""
    if out.exists():
        shutil.rmtree(out)
    for name in [model, *composing_models(sample, model)]:
        (out / name).mkdir(parents=True)
        for item in (sample / name).iterdir():
            if item.is_dir():
                shutil.copytree(item, out / name / item.name, symlinks=False)
            else:
                shutil.copy2(item, out / name / item.name)
        if configs and name in configs:
            (out / name / "config.pbtxt").write_text(configs[name])
    return out


def renamed(text: str, name: str) -> str:
    """Config text with its ``name:`` field set to ``name`` (Model Analyzer names variants
    ``<model>_config_<n>``)."""
    return re.sub(r'^name:\s*"[^"]*"', f'name: "{name}"', text, count=1, flags=re.M)


@contextlib.contextmanager
def serving(repository: Path, model: str, log_path: Path) -> Iterator[Any]:
    """``workbench serve`` (this checkout) over ``repository``, explicit model control, ``model`` loaded;
    stopped (SIGTERM, then SIGKILL) on the way out, its log written to ``log_path``."""
    from workbench.testing.process import ServerProcess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = ServerProcess([f"--model-repository={repository}", "--model-control-mode=explicit",
                            f"--load-model={model}"], timeout_s=300, env=env)
    try:
        yield server
    finally:
        status = server.stop(timeout_s=30)
        log_path.write_text(server.log + f"\n[exit status {status}]\n")


def inference_count(server: Any, model: str) -> int:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.url)
    try:
        stats = client.get_inference_statistics(model)
        return sum(int(s.get("inference_count", 0)) for s in stats.get("model_stats", []))
    finally:
        client.close()


# ---------------------------------------------------------------- perf_analyzer


def input_flags(model: str, data: Path) -> list[str]:
    """perf_analyzer's data flags: real inputs (bench/make_inputs.py, bench/data/sentences.json)."""
    if model == "digits_mlp":
        return ["--input-data", str(data / "digits_mlp.json")]
    if model == "minilm_encoder":
        return ["--input-data", str(data / "minilm_encoder.json"), *[f"--shape={s}" for s in MINILM_SHAPES]]
    return ["--input-data", str(data / "sentences.json")]


def ma_input_flags(model: str, data: Path) -> dict[str, object]:
    """:func:`input_flags` as Model Analyzer's ``perf_analyzer_flags``."""
    flags: dict[str, object] = {"input-data": input_flags(model, data)[1]}
    if model == "minilm_encoder":
        flags["shape"] = list(MINILM_SHAPES)
    return flags


def perf_analyzer(tools: Path, server: Any, model: str, conc: int, data: Path, out: Path,
                  window_flags: list[str]) -> dict[str, Any]:
    """One perf_analyzer run over gRPC at concurrency ``conc``: infer/s and p99 (ms), or an error."""
    csv_path = out.with_suffix(".csv")
    argv = [str(tools / "bin" / "perf_analyzer"), "-m", model, "-u", server.grpc_url, "-i", "grpc", "-b", "1",
            "--concurrency-range", str(conc), *window_flags, *input_flags(model, data),
            "-f", str(csv_path), "--verbose-csv"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    out.with_suffix(".log").write_text(" ".join(argv) + "\n\n" + run.stdout + run.stderr)
    if run.returncode != 0 or not csv_path.is_file():
        return {"concurrency": conc, "error": (run.stdout + run.stderr)[-400:]}
    with open(csv_path, newline="") as f:
        row = next(csv.DictReader(f))
    return {"concurrency": conc, "infer_per_s": float(row["Inferences/Second"]),
            "p99_ms": float(row["p99 latency"]) / 1e3}


def neutral_measurement(tools: Path, sample: Path, model: str, configs: dict[str, str], sla_ms: float,
                        data: Path, out: Path) -> dict[str, Any]:
    """The configuration ``configs`` measured the neutral way (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    repository = make_repository(sample, model, out / "repository", configs)
    result: dict[str, Any] = {"probe": speed_probe(), "points": []}
    try:
        with serving(repository, model, out / "server.log") as server:
            perf_analyzer(tools, server, model, 8, data, out / "warmup", WARMUP_PA)
            count0, cpu0 = inference_count(server, model), tree_cpu_s(server.process.pid)
            for conc in CONCURRENCIES:
                point = perf_analyzer(tools, server, model, conc, data, out / f"c{conc}", NEUTRAL_PA)
                result["points"].append(point)
                log(f"    c={conc}: {point.get('infer_per_s', '-')} infer/s, p99 {point.get('p99_ms', '-')} ms")
            inferences = inference_count(server, model) - count0
            cpu = tree_cpu_s(server.process.pid) - cpu0
            result["server_cpu_ms_per_infer"] = round(cpu / inferences * 1e3, 3) if inferences else None
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        result["error"] = str(e)[-2000:]
    meets = [p for p in result["points"] if "p99_ms" in p and p["p99_ms"] <= sla_ms]
    best = max(meets, key=lambda p: p["infer_per_s"], default=None)
    result["best"] = best
    return result


def calibrate_sla(tools: Path, sample: Path, model: str, data: Path, out: Path) -> dict[str, Any]:
    """p99 of the sample configuration at concurrency 1 times SLA_FACTOR, rounded up (2 digits)."""
    out.mkdir(parents=True, exist_ok=True)
    repository = make_repository(sample, model, out / "repository")
    with serving(repository, model, out / "server.log") as server:
        perf_analyzer(tools, server, model, 1, data, out / "warmup", WARMUP_PA)
        point = perf_analyzer(tools, server, model, 1, data, out / "c1", NEUTRAL_PA)
    if "p99_ms" not in point:
        raise RuntimeError(f"calibrating {model}: {point}")
    raw = point["p99_ms"] * SLA_FACTOR
    step = 10 ** (math.floor(math.log10(raw)) - 1)
    return {"c1_p99_ms": point["p99_ms"], "c1_infer_per_s": point["infer_per_s"],
            "sla_ms": math.ceil(raw / step) * step}


# ---------------------------------------------------------------- Model Analyzer


def counting_wrapper(tools: Path, folder: Path) -> tuple[Path, Path]:
    """A perf_analyzer that appends each invocation's arguments to a log, then runs the real one."""
    wrapper, calls = folder / "perf_analyzer", folder / "perf_analyzer_calls.log"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{tools / "bin" / "perf_analyzer"}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, calls


def ma_config(model: str, composing: list[str], repository: Path, server: Any, export: Path, pa_path: Path,
              sla_ms: float, data: Path, mode: str) -> dict[str, object]:
    """The ``model-analyzer profile -f`` mapping for this comparison (module docstring)."""
    from workbench.deploy.model_analyzer import profile_config

    config = profile_config([model], str(repository), launch_mode="remote", http_endpoint=server.url,
                            grpc_endpoint=server.grpc_url, metrics_url=server.metrics_url,
                            export_path=str(export), output_model_repository=str(export / "output-repository"),
                            max_concurrency=max(CONCURRENCIES), max_instance_count=max(INSTANCE_COUNTS),
                            max_batch_size=max(MAX_BATCH_SIZES), perf_analyzer_path=str(pa_path))
    config.update({
        "run_config_search_mode": mode,
        "run_config_search_min_concurrency": min(CONCURRENCIES),
        "run_config_search_min_instance_count": min(INSTANCE_COUNTS),
        "run_config_search_min_model_batch_size": min(MAX_BATCH_SIZES),
        "perf_analyzer_max_auto_adjusts": MA_MAX_AUTO_ADJUSTS,
        "objectives": {"perf_throughput": 10},
        "constraints": {"perf_latency_p99": {"max": round(sla_ms, 3)}},
        "profile_models": {model: {"cpu_only": True,
                                   "perf_analyzer_flags": {**MA_PA_FLAGS, **ma_input_flags(model, data)}}},
    })
    if composing:
        # an ensemble is searched in quick mode whatever the mode says; a composing model's instance
        # counts may be listed (a bounded dimension; a top-level model's may not be in quick mode)
        bounded = {"instance_group": [{"kind": "KIND_CPU", "count": list(INSTANCE_COUNTS)}]}
        config["cpu_only_composing_models"] = composing
        config["ensemble_composing_models"] = {name: {"model_config_parameters": bounded} for name in composing}
        # 1.58 parses ensemble_composing_models into the same object as profile_models: given both
        # in the YAML, it profiles the composing models instead of the ensemble. So the ensemble is
        # named on the command line (--profile-models, see ma_cli_args) and its flags are global.
        config["perf_analyzer_flags"] = config.pop("profile_models")[model]["perf_analyzer_flags"]  # type: ignore[index]
    return config


def run_tool(argv: list[str], cwd: Path, env: dict[str, str], log_path: Path, marker: str | None = None,
             loop_guard: tuple[str, str] | None = None) -> dict[str, Any]:
    """Run a tool in its own process group (killed whole after TOOL_TIMEOUT_S); its output to
    ``log_path``; wall time to exit and to the first line containing ``marker``; its CPU (children).
    ``loop_guard`` = (repeat, progress): after LOOP_LIMIT lines containing ``repeat`` with none
    containing ``progress`` between them, the tool is taken to loop and gets SIGINT (then SIGKILL)."""
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    marked: float | None = None
    repeats, interrupted = 0, None
    with open(log_path, "w", buffering=1) as sink:  # line-buffered: a long run can be followed
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        assert process.stdout is not None
        try:
            for line in process.stdout:
                sink.write(line)
                if marker and marked is None and marker in line:
                    marked = time.monotonic() - start
                if loop_guard and loop_guard[1] in line:
                    repeats = 0
                elif loop_guard and loop_guard[0] in line:
                    repeats += 1
                    if repeats == LOOP_LIMIT:
                        interrupted = round(time.monotonic() - start, 1)
                        log(f"  {Path(argv[0]).name} repeats itself ({LOOP_LIMIT}x '{loop_guard[0]}'): SIGINT")
                        process.send_signal(signal.SIGINT)
                    elif repeats == 20 * LOOP_LIMIT:
                        raise TimeoutError
                if time.monotonic() - start > TOOL_TIMEOUT_S:
                    raise TimeoutError
            process.wait(timeout=60)
        except (TimeoutError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except BaseException:  # interrupted: the tool and its perf_analyzer go too
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"exit_status": process.returncode, "wall_s": round(time.monotonic() - start, 1),
            "marker_s": None if marked is None else round(marked, 1), "interrupted_looping_at_s": interrupted,
            "tool_cpu_s": round(usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime, 1)}


def read_checkpoint(export: Path, model: str, sla_ms: float) -> list[dict[str, Any]]:
    """Every measurement in Model Analyzer's checkpoint (``0.ckpt``): its configuration (config.pbtxt
    texts by model name, composing models' included), concurrency, infer/s, p99 (ms) and whether the
    p99 meets ``sla_ms``."""
    path = export / "0.ckpt"
    if not path.is_file():
        return []
    results = json.loads(path.read_text())["ResultManager.results"]["_results"].get(model, {})
    rows = []
    for variant, (run_config, measurements) in results.items():
        model_run = run_config["_model_run_configs"][0]
        configs = {model: config_text(model_run["_model_config_variant"]["model_config"], model)}
        for composing in model_run.get("_composing_config_variants") or []:
            name = re.sub(r"_config_(\d+|default)$", "", composing["variant_name"])
            configs[name] = config_text(composing["model_config"], name)
        for measurement in measurements.values():
            first = measurement["_model_config_measurements"][0]
            metrics = {name: value["_value"] for name, value in first["_non_gpu_data_from_tag"].values()}
            p99 = float(metrics["perf_latency_p99"])
            rows.append({"config": variant, "configs": configs,
                         "concurrency": int(first["_model_specific_pa_params"]["concurrency-range"]),
                         "infer_per_s": float(metrics["perf_throughput"]), "p99_ms": p99, "passes": p99 <= sla_ms})
    return rows


def config_text(config_json: dict[str, Any], name: str) -> str:
    """A checkpoint's JSON model config as config.pbtxt text named ``name``."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    config = json_format.ParseDict(config_json, ModelConfig())
    config.name = name
    return str(text_format.MessageToString(config))


def ma_summary(export: Path, model: str) -> str | None:
    """The sentence of Model Analyzer's summary report that states its recommendation."""
    summary = export / "reports" / "summaries" / model / "result_summary.html"
    if not summary.is_file():
        return None
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", summary.read_text())))
    sentence = re.search(r"In \d+ measurements across \d+ configurations, .*?\.(?= |$)", text)
    return sentence.group(0) if sentence else text[:600]


def run_model_analyzer(tools: Path, sample: Path, model: str, sla_ms: float, data: Path, out: Path,
                       ma_mode: str = "auto") -> dict[str, Any]:
    """One Model Analyzer search and its recommendation, on a fresh server (module docstring)."""
    from workbench.deploy import yaml_text

    out.mkdir(parents=True, exist_ok=True)
    composing = composing_models(sample, model)
    repository = make_repository(sample, model, out / "repository")
    export = out / "export"
    pa_path, calls = counting_wrapper(tools, out)
    result: dict[str, Any] = {"probe": speed_probe()}
    with serving(repository, model, out / "server.log") as server:
        mode = ma_mode if ma_mode != "auto" else ("quick" if composing else "brute")
        result["search_mode"] = mode
        config = ma_config(model, composing, repository, server, export, pa_path, sla_ms, data, mode)
        (out / "profile.yaml").write_text(yaml_text.dump(config))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PYTHONUNBUFFERED"] = "1"  # its lines as they come: the wall time to "Profile complete"
        cpu0 = tree_cpu_s(server.process.pid)
        extra = [] if "profile_models" in config else ["--profile-models", model]
        argv = [str(tools / "bin" / "model-analyzer"), "profile", "-f", str(out / "profile.yaml"), *extra]
        (out / "command.txt").write_text(shlex.join(argv) + "\n")
        result.update(run_tool(argv,
                               out, env, out / "model-analyzer.log", marker="Profile complete",
                               loop_guard=("Existing measurement found", "Profiling ")))
        result["server_cpu_s"] = round(tree_cpu_s(server.process.pid) - cpu0, 1)
        result["server_loads"] = server.log.count(f"successfully loaded '{model}'")
    result["perf_analyzer_runs"] = len(calls.read_text().splitlines()) if calls.is_file() else 0
    rows = read_checkpoint(export, model, sla_ms)
    result["measurements"] = len(rows)
    result["configs_measured"] = len({r["config"] for r in rows})
    result["rows"] = [{k: v for k, v in r.items() if k != "configs"} for r in rows]
    result["summary"] = ma_summary(export, model)
    top = max((r for r in rows if r["passes"]), key=lambda r: r["infer_per_s"], default=None)
    result["top"] = None if top is None else {k: v for k, v in top.items() if k != "configs"}
    if top is None:
        result["why"] = "no measurement met the SLA" if rows else "no checkpoint"
        return result
    result["recommended"] = {name: knobs_of(text) for name, text in top["configs"].items()}
    (out / "recommended").mkdir(exist_ok=True)
    for name, text in top["configs"].items():
        (out / "recommended" / f"{name}.pbtxt").write_text(text)
    log(f"  MA recommends {top['config']} (c={top['concurrency']}): {result['recommended']}; neutral measurement")
    result["neutral"] = neutral_measurement(tools, sample, model, top["configs"], sla_ms, data, out / "neutral")
    return result


def knobs_of(text: str) -> dict[str, Any]:
    """The searched knobs of a config text (instance count, max batch size, dynamic batching)."""
    from workbench.config_edits.knobs import parse_text, read_knobs

    knobs = read_knobs(parse_text(text))
    return {"instance_count": knobs.instance_count, "max_batch_size": knobs.max_batch_size,
            "dynamic_batching": knobs.dynamic_batching}


# ---------------------------------------------------------------- workbench tune


def tune_space(model: str, composing: list[str]) -> str:
    """SPACE for ``model``, or for each composing model of an ensemble (``step/knob`` keys)."""
    if not composing:
        return SPACE
    return " ".join(f"{name}/{pair}" for name in composing for pair in SPACE.split())


def tune_configs(sample: Path, model: str, setting: dict[str, Any]) -> dict[str, str]:
    """Model name -> config text for ``workbench tune``'s chosen ``setting`` (knob names for the tuned
    model, ``step/knob`` for an ensemble's steps); an ensemble's max batch size is lowered to its
    steps' smallest, as Model Analyzer does (a step with a smaller one would not fit)."""
    from workbench.config_edits.knobs import parse_text, read_knobs, with_knob

    per_model: dict[str, dict[str, Any]] = {}
    for key, value in setting.items():
        owner, _, knob = key.rpartition("/")
        per_model.setdefault(owner or model, {})[knob] = tuple(value) if isinstance(value, list) else value
    configs = {name: with_knob((sample / name / "config.pbtxt").read_text(), **knobs)
               for name, knobs in per_model.items()}
    steps = [read_knobs(parse_text(text)).max_batch_size for name, text in configs.items() if name != model]
    own = configs.get(model, (sample / model / "config.pbtxt").read_text())
    if steps and min(steps) < read_knobs(parse_text(own)).max_batch_size:
        configs[model] = re.sub(r"^max_batch_size:\s*\d+", f"max_batch_size: {min(steps)}", own, count=1, flags=re.M)
    return configs


def tune_argv(tune_cmd: list[str], model: str, composing: list[str], url: str, server_pid: int, sla_ms: float,
              data: Path, out: Path) -> list[str]:
    """``workbench tune`` (its CLI), or with ``--tune-cmd api`` this script's own call of
    :func:`workbench.tuning.tune` with the same arguments (what the first results used, before the
    CLI landed)."""
    flags = {"model": model, "url": url, "protocol": "grpc", "sla_ms": sla_ms, "percentile": 99,
             "objective": "throughput", "strategy": "quick", "space": tune_space(model, composing),
             "levels": f"{min(CONCURRENCIES)}:{max(CONCURRENCIES)}", "measurement_interval_ms": TUNE_INTERVAL_MS,
             "stability_percentage": TUNE_STABILITY, "input_data": input_flags(model, data)[1],
             "shapes": ({s.split(":")[0]: [int(s.split(":")[1])] for s in MINILM_SHAPES}
                        if model == "minilm_encoder" else {}),
             "json": str(out / "tune.json"), "csv": str(out / "tune.csv"), "html": str(out / "tune.html")}
    if tune_cmd == ["api"]:
        (out / "tune_args.json").write_text(json.dumps(flags, indent=1))
        return [sys.executable, str(Path(__file__).resolve()), "--tune-api", str(out / "tune_args.json")]
    shapes = [f"--shape={shape}" for shape in MINILM_SHAPES] if model == "minilm_encoder" else []
    return [*tune_cmd, "-m", model, "-u", url, "-i", "grpc", "--server-pid", str(server_pid),
            "--sla-ms", f"{sla_ms:g}", "--percentile", "99", "--objective", "throughput", "--strategy", "quick",
            "--space", str(flags["space"]), "--concurrency", str(flags["levels"]),
            "--input-data", str(flags["input_data"]), *shapes, "--measurement-interval", str(TUNE_INTERVAL_MS),
            "--stability-percentage", f"{TUNE_STABILITY:g}", "--json", str(flags["json"]),
            "--csv", str(flags["csv"]), "--html", str(flags["html"])]


def tune_api(args_path: str) -> int:
    """``--tune-api ARGS.json``: :func:`workbench.tuning.tune` against a server, exports written."""
    import asyncio

    from workbench.tuning import tune
    from workbench.tuning.result import write_exports

    a = json.loads(Path(args_path).read_text())
    result = asyncio.run(tune(a["url"], a["model"], sla_ms=a["sla_ms"], percentile=a["percentile"],
                              objective=a["objective"], space=a["space"], levels=a["levels"],
                              strategy=a["strategy"], input_data=a["input_data"], shapes=a["shapes"],
                              measurement_interval_ms=a["measurement_interval_ms"],
                              stability_percentage=a["stability_percentage"], protocol=a["protocol"]))
    write_exports(result, a["json"], a["csv"], a["html"])
    print(result.summary())
    return 0


def run_workbench_tune(tune_cmd: list[str], tools: Path, sample: Path, model: str, sla_ms: float, data: Path,
                       out: Path) -> dict[str, Any]:
    """One ``workbench tune`` search against a fresh server, and its recommendation measured."""
    out.mkdir(parents=True, exist_ok=True)
    repository = make_repository(sample, model, out / "repository")
    report = out / "tune.json"
    result: dict[str, Any] = {"probe": speed_probe()}
    with serving(repository, model, out / "server.log") as server:
        argv = tune_argv(tune_cmd, model, composing_models(sample, model), server.grpc_url, server.process.pid,
                         sla_ms, data, out)
        (out / "command.txt").write_text(shlex.join(argv) + "\n")
        cpu0 = tree_cpu_s(server.process.pid)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        result.update(run_tool(argv, ROOT, env, out / "tune.log"))
        result["server_cpu_s"] = round(tree_cpu_s(server.process.pid) - cpu0, 1)
    if not report.is_file():
        result["why"] = "no --json report: " + (out / "tune.log").read_text()[-1500:]
        return result
    answer = json.loads(report.read_text())
    result.update({"tool_wall_s": answer.get("wall_s"), "measurements": answer.get("measurements"),
                   "windows": answer.get("windows"), "why": answer.get("why"), "chosen": answer.get("chosen")})
    if result["chosen"]:
        result["chosen"] = {k: v for k, v in result["chosen"].items() if k != "window_results"}
    chosen = answer.get("chosen")
    if not chosen:
        return result
    # the tuner recommends its best point only when it beats the served config by more than its
    # measurement tolerance ("apply"); otherwise it recommends keeping the served config, and that
    # is what gets measured
    result["applies"] = bool(answer.get("apply"))
    if result["applies"]:
        configs = tune_configs(sample, model, chosen.get("setting") or {})
    else:
        configs = {name: (sample / name / "config.pbtxt").read_text()
                   for name in [model, *composing_models(sample, model)]}
    result["recommended"] = {name: knobs_of(text) for name, text in configs.items()}
    (out / "recommended").mkdir(exist_ok=True)
    for name, text in configs.items():
        (out / "recommended" / f"{name}.pbtxt").write_text(text)
    log(f"  workbench tune chose {chosen.get('label')} at {chosen.get('level')}; neutral measurement")
    result["neutral"] = neutral_measurement(tools, sample, model, configs, sla_ms, data, out / "neutral")
    return result


# ---------------------------------------------------------------- tables


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def setting_text(model: str, recommended: dict[str, dict[str, Any]] | None) -> str:
    """``m: 2×CPU, mbs 4``, per model; an ensemble's own entry shows its max batch size only."""
    if not recommended:
        return "-"
    return "; ".join(f"{name}: mbs {k['max_batch_size']}" if name == model and len(recommended) > 1 else
                     f"{name}: {k['instance_count']}×CPU, mbs {k['max_batch_size']}"
                     + ("" if k["dynamic_batching"] else ", no batcher") for name, k in recommended.items())


def measurements_text(side: str, run: dict[str, Any]) -> str:
    if side == "ma":
        return f"{run.get('perf_analyzer_runs', '-')} PA runs / {run.get('measurements', '-')} kept"
    return f"{run.get('measurements', '-')} points / {run.get('windows', '-')} windows"


def tables(results: dict[str, Any]) -> str:
    meta = results["meta"]
    md = [f"Machine: {meta['machine']}; {meta['date_utc']}; code {meta['code']}; sample repository "
          f"{meta['sample_repository']}.", "",
          "SLA per model (p99 of the sample configuration at c=1, perf_analyzer gRPC, × "
          f"{SLA_FACTOR:g}, rounded up):", "",
          "| model | c=1 p99 ms | c=1 infer/s | SLA p99 ms |", "|---|---|---|---|"]
    for model, sla in results["sla"].items():
        md.append(f"| {model} | {cell(sla.get('c1_p99_ms'), 2)} | {cell(sla.get('c1_infer_per_s'))} | "
                  f"{cell(sla['sla_ms'], 1)} |")
    md += ["", "Per round (wall: process start to recommendation, MA to its 'Profile complete' line, exit in "
           "brackets; neutral: best perf_analyzer gRPC infer/s over c=1..16 with p99 within the SLA, at c; "
           "probe: 200 single-threaded 256×256 matmuls, ms, and loadavg before the run):", "",
           "| model | round | tool | wall s | measurements | recommended | its own claim | neutral infer/s "
           "(c, p99 ms) | server CPU ms/infer | probe ms / loadavg |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for model in results["models"]:
        for rnd in results["rounds"]:
            for side in SIDES:
                run = rnd.get(model, {}).get(side)
                if run is None:
                    continue
                md.append(row_text(model, rnd["round"], side, run))
    md += ["", "Medians over rounds:", "", "| model | tool | wall s | measurements | neutral infer/s |",
           "|---|---|---|---|---|"]
    for model in results["models"]:
        for side in SIDES:
            runs = [r[model][side] for r in results["rounds"] if side in r.get(model, {})]
            if not runs:
                continue
            walls = [float(r.get("marker_s") or r.get("wall_s")) for r in runs if r.get("wall_s") is not None]
            counts = [float(r.get("perf_analyzer_runs") if side == "ma" else r.get("measurements") or 0)
                      for r in runs]
            best = [((r.get("neutral") or {}).get("best") or {}).get("infer_per_s") for r in runs]
            md.append(f"| {model} | {SIDE_NAMES[side]} | {cell(med(walls))} | {cell(med(counts), 0)} | "
                      f"{cell(med([b for b in best if b is not None]))} |")
    return "\n".join(md) + "\n"


def row_text(model: str, round_no: int, side: str, run: dict[str, Any]) -> str:
    neutral = run.get("neutral") or {}
    best = neutral.get("best")
    wall = cell(run.get("marker_s") or run.get("wall_s"))
    if side == "ma" and run.get("marker_s") is not None:
        wall += f" ({cell(run.get('wall_s'))})"
    if side == "ma":
        top = run.get("top") or {}
        claim = (f"{cell(top.get('infer_per_s'))} at c={top.get('concurrency')}, p99 {cell(top.get('p99_ms'), 2)}"
                 if top else run.get("why", "-"))
    else:
        chosen = run.get("chosen") or {}
        p99_ms = (chosen.get("latency_us") or {}).get("99", 0) / 1e3
        claim = (f"{cell(chosen.get('throughput_infer_per_s'))} at c={(chosen.get('level') or {}).get('value')}, "
                 f"p99 {cell(p99_ms, 2)}" if chosen else str(run.get("why", "-"))[:120])
    measured = (f"{cell(best['infer_per_s'])} (c={best['concurrency']}, {cell(best['p99_ms'], 2)})" if best
                else ("none within the SLA" if neutral.get("points") else neutral.get("error", "-")[:80]))
    probe = run.get("probe") or {}
    recommended = setting_text(model, run.get("recommended"))
    if run.get("applies") is False:
        recommended = f"served config kept ({recommended})"
    return (f"| {model} | {round_no} | {SIDE_NAMES[side]} | {wall} | {measurements_text(side, run)} | "
            f"{recommended} | {claim} | {measured} | "
            f"{cell(neutral.get('server_cpu_ms_per_infer'), 3)} | {cell(probe.get('matmul_ms'))} / "
            f"{probe.get('loadavg', '-')} |")


# ---------------------------------------------------------------- main


def ensure_tools(tools: Path) -> None:
    if not (tools / "bin" / "model-analyzer").is_file() or not (tools / "bin" / "perf_analyzer").is_file():
        log(f"building the Model Analyzer venv in {tools} (scripts/model_analyzer_env.sh; a few minutes)")
        subprocess.run(["bash", str(ROOT / "scripts" / "model_analyzer_env.sh"), str(tools)], check=True)


def parse_sla(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in (item.split("=") for item in text.split(",") if item)}


def run(a: argparse.Namespace) -> dict[str, Any]:
    tools, sample, out = Path(a.tools).resolve(), Path(a.sample_repository).resolve(), Path(a.out)
    ensure_tools(tools)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_inputs.py"), str(data)], check=True)
    shutil.copy(ROOT / "bench" / "data" / "sentences.json", data / "sentences.json")
    code = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                          text=True, check=False).stdout.strip()
    results: dict[str, Any] = {
        "meta": {"machine": machine(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "code": code,
                 "sample_repository": str(sample), "space": SPACE, "concurrency": list(CONCURRENCIES),
                 "ma_pa_flags": MA_PA_FLAGS, "ma_max_auto_adjusts": MA_MAX_AUTO_ADJUSTS,
                 "neutral_pa": NEUTRAL_PA, "tune_cmd": a.tune_cmd},
        "models": a.models, "sla": {}, "rounds": []}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=1))

    fixed = parse_sla(a.sla_ms)
    for model in a.models:
        if model in fixed:
            results["sla"][model] = {"sla_ms": fixed[model]}
        else:
            log(f"{model}: calibrating the SLA (c=1 p99 × {SLA_FACTOR:g})")
            results["sla"][model] = calibrate_sla(tools, sample, model, data, out / "sla" / model)
        log(f"{model}: SLA p99 {results['sla'][model]['sla_ms']:g} ms")
        save()
    tune_cmd = a.tune_cmd.split()
    for round_no in range(1, a.rounds + 1):
        rnd: dict[str, Any] = {"round": round_no}
        results["rounds"].append(rnd)
        for model in a.models:
            sla_ms = results["sla"][model]["sla_ms"]
            for side in a.sides:
                log(f"round {round_no}: {model}, {SIDE_NAMES[side]} (SLA {sla_ms:g} ms)")
                folder = out / f"r{round_no}" / model / side
                if side == "ma":
                    result = run_model_analyzer(tools, sample, model, sla_ms, data, folder, a.ma_mode)
                else:
                    result = run_workbench_tune(tune_cmd, tools, sample, model, sla_ms, data, folder)
                rnd.setdefault(model, {})[side] = result
                save()
                log(f"  wall {result.get('marker_s') or result.get('wall_s')} s; neutral best "
                    f"{((result.get('neutral') or {}).get('best') or {}).get('infer_per_s')}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    parser.add_argument("--sides", type=lambda s: s.split(","), default=list(SIDES))
    parser.add_argument("--ma-mode", choices=("auto", "quick", "brute"), default="auto",
                        help="Model Analyzer's run_config_search_mode (auto: quick for an ensemble, else brute)")
    parser.add_argument("--sla-ms", default="", help="model=ms,... (others are calibrated)")
    parser.add_argument("--sample-repository", default=str(ROOT / "sample_models" / "repository"))
    parser.add_argument("--tools", default=os.environ.get("MODEL_ANALYZER_ENV",
                                                          str(ROOT / ".venv-production" / "model-analyzer")))
    parser.add_argument("--tune-cmd", default=f"{sys.executable} -m workbench.hosts.cli tune",
                        help="the workbench tune command line (default: this checkout's), or 'api': "
                             "workbench.tuning.tune called by this script")
    parser.add_argument("--tune-api", metavar="ARGS_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=f"/tmp/tune_vs_ma/{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
    parser.add_argument("--tables-only", metavar="DIR")
    a = parser.parse_args(argv)
    if a.tune_api:
        return tune_api(a.tune_api)
    # SIGTERM ends the run as Ctrl-C does: the servers and the tool running are stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if a.tables_only:
        results = json.loads((Path(a.tables_only) / "results.json").read_text())
        out = Path(a.tables_only)
    else:
        unknown = [s for s in a.sides if s not in SIDES]
        if unknown:
            parser.error(f"unknown side(s) {unknown}; choose from {SIDES}")
        results, out = run(a), Path(a.out)
    text = tables(results)
    (out / "tables.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
