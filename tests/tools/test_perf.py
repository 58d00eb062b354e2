"""``workbench.perf`` against the real engine in process, on the real sample models.

digits_mlp (FP32 [64], max_batch_size 64, two versions), text_embedder (an ensemble of the
Python tokenizer and the ONNX MiniLM encoder, BYTES in) and minilm_encoder (INT64 inputs
with dynamic dims). Windows are short (300 ms): these tests check what is measured and
reported, never how fast; speed lives in bench/.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import Server, ServerOptions, Tensor
from workbench.perf import (
    InProcessClient,
    LoadLevel,
    PerfError,
    PerfOptions,
    Workload,
    best_under_sla,
    csv_text,
    knee,
    prepare_workload,
    run_step,
    sweep,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODELS = ["digits_mlp", "text_embedder", "minilm_encoder"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(sample_repository: Path):
    options = ServerOptions(model_repository=[str(sample_repository)],
                            model_control_mode="explicit", load_model=MODELS)
    async with Server(options) as engine:
        yield engine


@pytest.fixture
def client(server: Server) -> InProcessClient:
    return InProcessClient(server)


def quick(model: str = "digits_mlp", **overrides) -> PerfOptions:
    values = {"measurement_interval_ms": 300, "warmup_ms": 50, "seed": 7, **overrides}
    return PerfOptions(model, **values)


def sent_tensors(workload: Workload) -> list[list[Tensor]]:
    """The tensors of each prepared request (:class:`InProcessClient` prepares
    ``(model, version, tensors)``; to a workload its requests are opaque)."""
    tensors = []
    for request in workload.requests:
        assert isinstance(request, tuple)
        tensors.append(request[2])
    return tensors


def write_data(tmp_path: Path, document: dict) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return str(path)


async def test_concurrency_sweep_yields_each_step_with_client_and_server_numbers(client) -> None:
    levels = [LoadLevel.concurrency(1), LoadLevel.concurrency(3)]
    began = time.monotonic()
    results = [r async for r in sweep(client, quick(), levels)]
    elapsed_s = time.monotonic() - began
    assert [r.level for r in results] == levels
    # each window lasts the 300 ms asked for and leaves out its step's 50 ms warm-up (no upper
    # bound on a busy machine's timing: how far a window overshoots is bench/perf_window.py's)
    assert sum(r.window_s for r in results) + 0.05 * len(levels) <= elapsed_s
    for result in results:
        assert result.request_count > 0 and result.error_count == 0
        assert result.throughput_infer_per_s == pytest.approx(result.request_count / result.window_s)
        assert result.window_s >= 0.3 - 0.001
        assert (result.latency_min_us <= result.p50_us <= result.p90_us <= result.p95_us
                <= result.p99_us <= result.latency_max_us)
        assert result.latency_min_us <= result.latency_avg_us <= result.latency_max_us
        assert result.stabilizing_latency_us == result.latency_avg_us  # no --percentile
        server = result.server
        assert server is not None and server.version == "2"  # the latest of digits_mlp's two
        # the server saw the same requests, give or take those in flight at either edge
        concurrency = int(result.level.value)
        assert abs(server.count("success") - result.request_count) <= 2 * concurrency
        assert server.avg_us("compute_infer") > 0
        assert server.avg_ns("success") <= result.latency_avg_us * 1000 + 1000


async def test_batch_size_weights_throughput_and_reaches_the_server(client) -> None:
    result = await run_step(client, await prepare_workload(client, quick(batch_size=4)),
                            LoadLevel.concurrency(2), quick(batch_size=4))
    assert result.batch_size == 4
    assert result.throughput_infer_per_s == pytest.approx(4 * result.request_count / result.window_s)
    assert result.server is not None
    assert result.server.inference_count == 4 * result.server.count("success")


async def test_constant_request_rate_sends_on_schedule(client) -> None:
    options = quick(measurement_interval_ms=400)
    result = await run_step(client, await prepare_workload(client, options),
                            LoadLevel.request_rate(100), options)
    # 100 requests/s over 0.4 s: 40 sends, each answered long before the next is due (a late
    # timer is caught up with, so the count holds on a busy machine too)
    assert 30 <= result.sent_count <= 50
    assert 30 <= result.request_count <= 50
    assert result.send_rate_per_s == pytest.approx(100, rel=0.25)


async def test_poisson_rate_with_a_seed_is_an_open_loop(client) -> None:
    options = quick(measurement_interval_ms=400, request_distribution="poisson", seed=3)
    result = await run_step(client, await prepare_workload(client, options),
                            LoadLevel.request_rate(100), options)
    assert 15 <= result.sent_count <= 75 and result.request_count > 0


async def test_a_rate_beyond_the_inflight_cap_counts_delayed_requests(client) -> None:
    options = quick(max_inflight=1)
    result = await run_step(client, await prepare_workload(client, options),
                            LoadLevel.request_rate(20000), options)
    # one request at a time cannot send every 50 µs: perf_analyzer's "delayed" warning case
    assert result.delayed_pct > 50
    assert result.send_rate_per_s < 20000


async def test_percentile_stabilizes_and_adds_its_column(client) -> None:
    options = quick(percentile=75)
    result = await run_step(client, await prepare_workload(client, options),
                            LoadLevel.concurrency(1), options)
    assert sorted(result.percentiles_us) == [50, 75, 90, 95, 99]
    assert result.stabilizing_latency_us == result.percentiles_us[75]
    header = csv_text([result]).splitlines()[0].split(",")
    assert header[-5:] == ["p50 latency", "p75 latency", "p90 latency", "p95 latency", "p99 latency"]


async def test_input_data_file_in_all_three_forms(client, tmp_path: Path) -> None:
    rows = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
    path = write_data(tmp_path, {"data": [
        {"pixels": rows[0].tolist()},
        {"pixels": {"content": rows[1].reshape(8, 8).tolist(), "shape": [64]}},
        {"pixels": {"b64": base64.b64encode(rows[2].tobytes()).decode()}},
    ]})
    workload = await prepare_workload(client, quick(input_data=path, batch_size=2))
    # batches of two consecutive entries, round-robin: [0, 1], [2, 0], [1, 2]
    sent = [tensors[0].data for tensors in sent_tensors(workload)]
    assert [a.shape for a in sent] == [(2, 64)] * 3
    np.testing.assert_array_equal(np.concatenate(sent), rows[[0, 1, 2, 0, 1, 2]])
    result = await run_step(client, workload, LoadLevel.concurrency(2), quick(input_data=path))
    assert result.request_count > 0 and result.error_count == 0


async def test_bytes_inputs_reach_an_ensemble(client, tmp_path: Path) -> None:
    path = write_data(tmp_path, {"data": [{"TEXT": ["a short sentence"]},
                                          {"TEXT": {"content": ["another one"], "shape": [1]}}]})
    for data in (path, "random"):
        options = quick("text_embedder", input_data=data, string_length=16)
        workload = await prepare_workload(client, options)
        assert sent_tensors(workload)[0][0].data.dtype == object
        result = await run_step(client, workload, LoadLevel.concurrency(1), options)
        assert result.request_count > 0 and result.server is not None


async def test_dynamic_dims_need_a_shape(client) -> None:
    with pytest.raises(PerfError, match=r'"input_ids" with model shape \[-1\].*--shape'):
        await prepare_workload(client, quick("minilm_encoder", input_data="zero"))
    shapes = {"input_ids": [8], "attention_mask": [8], "token_type_ids": [8]}
    options = quick("minilm_encoder", input_data="zero", shapes=shapes)
    workload = await prepare_workload(client, options)
    assert [t.data.shape for t in sent_tensors(workload)[0]] == [(1, 8)] * 3
    result = await run_step(client, workload, LoadLevel.concurrency(1), options)
    assert result.request_count > 0


def encoder_data(tmp_path: Path, token_types: list[int]) -> str:
    entries = [{name: {"content": [1000, 2000, 3000] if name == "input_ids" else
                       ([t] * 3 if name == "token_type_ids" else [1, 1, 1]), "shape": [3]}
                for name in ("input_ids", "attention_mask", "token_type_ids")}
               for t in token_types]
    return write_data(tmp_path, {"data": entries})


async def test_a_failed_request_stops_the_measurement_with_its_message(client, tmp_path) -> None:
    options = quick("minilm_encoder", input_data=encoder_data(tmp_path, [0, 5]))
    workload = await prepare_workload(client, options)
    with pytest.raises(PerfError, match=r"Concurrency: 1: a request failed: .*indices element out "
                                        r"of data bounds.*--continue-on-error"):
        await run_step(client, workload, LoadLevel.concurrency(1), options)


async def test_continue_on_error_counts_failures(client, tmp_path) -> None:
    # entries alternate: token type 5 is out of the encoder's [0, 1] table
    options = quick("minilm_encoder", input_data=encoder_data(tmp_path, [0, 5]),
                    continue_on_error=True)
    workload = await prepare_workload(client, options)
    result = await run_step(client, workload, LoadLevel.concurrency(1), options)
    assert result.request_count > 0 and result.error_count > 0
    assert abs(result.request_count - result.error_count) <= 2
    assert "indices element out of data bounds" in result.errors[0]


async def test_unknown_model_is_one_clear_error(client) -> None:
    with pytest.raises(PerfError, match="failed to get model metadata: Request for unknown model: "
                                        "'nope' is not found"):
        await prepare_workload(client, quick("nope"))


async def test_batch_size_beyond_the_model(client) -> None:
    with pytest.raises(PerfError, match="expecting batch size <= 64 for model 'digits_mlp'"):
        await prepare_workload(client, quick(batch_size=65))


async def test_latency_threshold_ends_the_sweep(client) -> None:
    levels = [LoadLevel.concurrency(1), LoadLevel.concurrency(2)]
    results = [r async for r in sweep(client, quick(latency_threshold_ms=0.001), levels)]
    assert [r.level for r in results] == levels[:1]


async def test_sweep_knee_and_sla_on_a_real_model(client) -> None:
    levels = [LoadLevel.concurrency(c) for c in (1, 2, 4)]
    results = [r async for r in sweep(client, quick(), levels)]
    point = knee(results)
    assert point is None or point in results[:-1]
    fastest = max(results, key=lambda r: r.throughput_infer_per_s)
    assert best_under_sla(results, p99_us=10**9) is fastest
    assert best_under_sla(results, p99_us=0) is None


async def test_cancelling_a_step_stops_its_load(client) -> None:
    options = quick(measurement_interval_ms=60_000)
    workload = await prepare_workload(client, options)
    step = asyncio.ensure_future(run_step(client, workload, LoadLevel.concurrency(4), options))
    await asyncio.sleep(0.2)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert load_tasks() == []


async def test_closing_a_sweep_early_leaves_no_load_running(client) -> None:
    levels = [LoadLevel.concurrency(1), LoadLevel.concurrency(2)]
    steps = sweep(client, quick(), levels)
    first = await anext(steps)
    await steps.aclose()
    assert first.level == levels[0]
    assert load_tasks() == []


def load_tasks() -> list[asyncio.Task]:
    """Tasks of the load loops still alive (the engine's own tasks are left out)."""
    loop_file = str(Path("perf", "load.py"))
    return [t for t in asyncio.all_tasks()
            if (code := getattr(t.get_coro(), "cr_code", None)) is not None
            and code.co_filename.endswith(loop_file)]
