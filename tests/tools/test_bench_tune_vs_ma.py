"""bench/tune_vs_model_analyzer.py (issue 31's side by side): what it reads from Model Analyzer's
checkpoint, how it turns workbench tune's chosen setting into configs (an ensemble's steps included),
and its table. No tool runs here (``make bench-tune`` runs them; bench/RESULTS.md has the numbers)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tune_vs_ma", ROOT / "bench" / "tune_vs_model_analyzer.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# one measurement of a real Model Analyzer 1.58 checkpoint (brute search of digits_mlp on workbench
# serve), trimmed to the fields the script reads
VARIANT = {"model_config": {
    "name": "digits_mlp", "platform": "onnxruntime_onnx", "versionPolicy": {"latest": {"numVersions": 2}},
    "maxBatchSize": 1, "input": [{"name": "pixels", "dataType": "TYPE_FP32", "dims": ["64"]}],
    "output": [{"name": "logits", "dataType": "TYPE_FP32", "dims": ["10"]}],
    "instanceGroup": [{"count": 1, "kind": "KIND_CPU"}], "dynamicBatching": {},
    "parameters": {"intra_op_thread_count": {"stringValue": "1"}}, "backend": "onnxruntime"},
    "variant_name": "digits_mlp_config_0", "cpu_only": True}
MEASUREMENT = {"_model_config_measurements": [{
    "_model_specific_pa_params": {"batch-size": 1, "concurrency-range": 2},
    "_non_gpu_data_from_tag": {"perf_latency_p99": ["perf_latency_p99", {"_value": 2.052, "_timestamp": 0}],
                               "perf_throughput": ["perf_throughput", {"_value": 1881.79, "_timestamp": 0}]}}]}

ENSEMBLE = """name: "ens"
platform: "ensemble"
max_batch_size: 64
ensemble_scheduling { step [ { model_name: "a" model_version: -1 }, { model_name: "b" model_version: -1 } ] }
"""
STEP = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 64
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ }}
"""


def test_checkpoint_rows_carry_their_config_and_the_sla_verdict(tmp_path: Path) -> None:
    checkpoint = {"ResultManager.results": {"_results": {"digits_mlp": {"digits_mlp_config_0": [
        {"_model_run_configs": [{"_model_config_variant": VARIANT, "_composing_config_variants": []}]},
        {"digits_mlp_config_0 -m digits_mlp --concurrency-range=2": MEASUREMENT}]}}}}
    (tmp_path / "0.ckpt").write_text(json.dumps(checkpoint))
    (row,) = bench.read_checkpoint(tmp_path, "digits_mlp", sla_ms=2.0)
    assert (row["config"], row["concurrency"], row["infer_per_s"], row["p99_ms"]) == (
        "digits_mlp_config_0", 2, 1881.79, 2.052)
    assert not row["passes"]  # 2.052 ms > 2 ms
    assert bench.knobs_of(row["configs"]["digits_mlp"]) == {
        "instance_count": 1, "max_batch_size": 1, "dynamic_batching": True}
    assert bench.read_checkpoint(tmp_path, "digits_mlp", sla_ms=2.1)[0]["passes"]


def test_an_ensembles_chosen_steps_become_configs_and_its_batch_limit_follows(tmp_path: Path) -> None:
    for name, text in (("ens", ENSEMBLE), ("a", STEP.format(name="a")), ("b", STEP.format(name="b"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(text)
    assert bench.composing_models(tmp_path, "ens") == ["a", "b"]
    assert bench.tune_space("ens", ["a", "b"]).split()[:2] == ["a/instance_count=1,2", "a/max_batch_size=1,2,4,8,16"]
    configs = bench.tune_configs(tmp_path, "ens", {"a/instance_count": 2, "a/max_batch_size": 4,
                                                    "b/max_batch_size": 8})
    knobs = {name: bench.knobs_of(text) for name, text in configs.items()}
    assert knobs["a"] == {"instance_count": 2, "max_batch_size": 4, "dynamic_batching": True}
    assert knobs["b"]["max_batch_size"] == 8 and knobs["ens"]["max_batch_size"] == 4


def test_the_table_has_a_row_per_run_and_the_medians() -> None:
    run = {"wall_s": 164.0, "marker_s": 158.0, "perf_analyzer_runs": 31, "measurements": 31,
           "recommended": {"digits_mlp": {"instance_count": 1, "max_batch_size": 1, "dynamic_batching": True}},
           "top": {"config": "digits_mlp_config_0", "concurrency": 2, "infer_per_s": 1881.79, "p99_ms": 2.052},
           "neutral": {"best": {"concurrency": 4, "infer_per_s": 1750.0, "p99_ms": 4.1},
                       "points": [{"concurrency": 4, "infer_per_s": 1750.0, "p99_ms": 4.1}],
                       "server_cpu_ms_per_infer": 0.745},
           "probe": {"matmul_ms": 74.1, "loadavg": "2.44 1.62 0.78"}}
    tune = {"wall_s": 12.2, "measurements": 2, "windows": 6, "chosen": None, "why": "no stable point",
            "probe": {"matmul_ms": 80.0, "loadavg": "1.0 1.0 1.0"}}
    results = {"meta": {"machine": "2 vCPU", "date_utc": "2026-12-02 19:57", "code": "abc",
                        "sample_repository": "repo"},
               "models": ["digits_mlp"], "sla": {"digits_mlp": {"sla_ms": 6.1}},
               "rounds": [{"round": 1, "digits_mlp": {"ma": run, "workbench": tune}}]}
    text = bench.tables(results)
    assert ("| digits_mlp | 1 | model-analyzer | 158.0 (164.0) | 31 PA runs / 31 kept | digits_mlp: 1×CPU, mbs 1 |"
            in text)
    assert "1750.0 (c=4, 4.10)" in text and "0.745" in text
    assert "| digits_mlp | 1 | workbench tune | 12.2 | 2 points / 6 windows | - | no stable point |" in text
    assert "| digits_mlp | model-analyzer | 158.0 | 31 | 1750.0 |" in text
