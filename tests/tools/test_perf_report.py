"""``workbench.perf``'s pure parts on synthetic data: perf_analyzer's arithmetic (window,
percentiles, µs truncation, Network+Server), its CSV header and rows, the JSON records, the
summary lines, the knee and SLA readers, ranges, input-data files and statistics deltas."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import workbench.perf
from workbench.perf import (
    InputSpec,
    LoadLevel,
    ModelInfo,
    PerfError,
    PerfOptions,
    StepResult,
    best_under_sla,
    csv_columns,
    csv_text,
    json_records,
    knee,
    levels_from_range,
    shape_overrides,
    summary_line,
    summary_text,
)
from workbench.perf.input_data import load_input_data
from workbench.perf.inputs import request_tensors
from workbench.perf.load import RequestRecord, delay_tolerance_ns
from workbench.perf.results import percentile_ns, summarize
from workbench.perf.server_stats import ServerStats, stats_delta

MS = 1_000_000  # ns


def records(latencies_us: list[int], window_ms: int = 1000) -> list[RequestRecord]:
    """Requests ending evenly through a window [0, window_ms], each 10 µs of client send
    and 5 µs of client recv."""
    step = window_ms * MS // len(latencies_us)
    out = []
    for i, latency in enumerate(latencies_us):
        end = (i + 1) * step
        start = end - latency * 1000
        out.append(RequestRecord(start, start + 10_000, end - 5_000, end, ok=True))
    return out


def server_stats(cache: bool = False, **durations: tuple[int, int]) -> ServerStats:
    return ServerStats("1", 100, 50, durations, response_cache=cache)


def result(level: LoadLevel, latencies_us: list[int], server: ServerStats | None = None,
           percentile: int | None = None) -> StepResult:
    made = summarize(level, 1, records(latencies_us), (0, 1000 * MS), len(latencies_us),
                     percentile=percentile, server=server)
    assert made is not None
    return made


def curve(points: list[tuple[int, float, int]]) -> list[StepResult]:
    """Results with given (concurrency, throughput, p99 µs), everything else constant."""
    made = []
    for concurrency, throughput, p99 in points:
        base = result(LoadLevel.concurrency(concurrency), [100] * 10)
        percentiles = {**base.percentiles_us, 99: p99}
        made.append(StepResult(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                                  "throughput_infer_per_s": throughput, "percentiles_us": percentiles}))
    return made


# ------------------------------------------------------------------ perf_analyzer's arithmetic
def test_percentiles_use_perf_analyzers_nearest_rank_index() -> None:
    values = list(range(1, 11))  # 1..10
    assert [percentile_ns(values, p) for p in (50, 90, 95, 99)] == [6, 9, 10, 10]
    assert percentile_ns([7], 99) == 7
    with pytest.raises(ValueError):
        percentile_ns([], 50)


def test_summarize_counts_requests_that_end_in_the_window() -> None:
    inside = records([1000] * 8)
    before = RequestRecord(-5 * MS, -5 * MS, -MS, -MS, ok=True)  # ended before the window
    after = RequestRecord(990 * MS, 990 * MS, 1005 * MS, 1005 * MS, ok=True)
    failed = RequestRecord(10 * MS, 10 * MS, 11 * MS, 11 * MS, ok=False, error="boom")
    made = summarize(LoadLevel.concurrency(2), 4, [before, *inside, after, failed],
                     (0, 1000 * MS), sent_count=9)
    assert made is not None
    assert made.request_count == 8 and made.error_count == 1 and made.errors == ("boom",)
    assert made.throughput_infer_per_s == pytest.approx(32.0)  # 8 requests x batch 4 / 1 s
    assert made.send_rate_per_s == pytest.approx(9.0)
    assert made.latency_avg_us == 1000 and made.latency_std_us == 0
    assert made.client_send_us == 10 and made.client_recv_us == 5 and made.response_wait_us == 985


def test_summarize_without_a_success_is_none() -> None:
    failed = RequestRecord(0, 0, MS, MS, ok=False, error="boom")
    assert summarize(LoadLevel.concurrency(1), 1, [failed], (0, 10 * MS), 1) is None


def test_microseconds_truncate_like_perf_analyzer() -> None:
    made = result(LoadLevel.concurrency(1), [1, 2])  # 1 µs and 2 µs: mean 1.5 µs
    assert made.latency_avg_us == 1 and made.p99_us == 2


def test_network_is_client_wait_minus_server_time() -> None:
    server = server_stats(success=(10, 10 * 800_000), queue=(10, 10 * 100_000),
                          compute_input=(10, 10 * 50_000), compute_infer=(10, 10 * 400_000),
                          compute_output=(10, 10 * 50_000))
    made = result(LoadLevel.concurrency(1), [1000] * 10, server)
    # wait = 1000 - 10 (send) - 5 (recv) = 985 µs; server = 100 + 500 µs
    assert made.network_us == 385
    busy = server_stats(queue=(10, 10 * 5_000_000))
    assert result(LoadLevel.concurrency(1), [1000] * 10, busy).network_us == 0  # capped at 0


def test_stability_compares_the_windows_thirds() -> None:
    assert result(LoadLevel.concurrency(1), [100] * 30).stable
    assert not result(LoadLevel.concurrency(1), [100] * 20 + [400] * 10).stable


# ------------------------------------------------------------------ CSV, JSON, console
CONCURRENCY_HEADER = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,"
                      "Server Queue,Server Compute Input,Server Compute Infer,"
                      "Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,"
                      "p99 latency")


def test_csv_header_is_perf_analyzers() -> None:
    served = [result(LoadLevel.concurrency(1), [500] * 5, server_stats(queue=(5, 5000)))]
    assert csv_columns(served) == CONCURRENCY_HEADER.split(",")
    assert csv_text(served, verbose_csv=True).splitlines()[0] == (
        CONCURRENCY_HEADER + ",Avg latency,request/response,response wait")
    rate = [result(LoadLevel.request_rate(50), [500] * 5)]  # no server statistics read
    assert csv_text(rate).splitlines()[0] == ("Request Rate,Inferences/Second,Client Send,"
                                              "Client Recv,p50 latency,p90 latency,p95 latency,"
                                              "p99 latency")
    cached = [result(LoadLevel.concurrency(1), [500] * 5, server_stats(cache=True))]
    assert csv_columns(cached)[8:11] == ["Server Cache Hit", "Server Cache Miss", "Client Recv"]
    with_percentile = [result(LoadLevel.concurrency(1), [500] * 5, percentile=95)]
    assert csv_columns(with_percentile, verbose_csv=True)[-3:] == [
        "p99 latency", "request/response", "response wait"]  # no Avg latency with --percentile


def test_csv_rows_are_sorted_by_throughput_with_microsecond_values() -> None:
    server = server_stats(queue=(10, 10 * 123_456), compute_input=(10, 10 * 1_999),
                          compute_infer=(10, 10 * 300_000), compute_output=(10, 0))
    fast = result(LoadLevel.concurrency(4), [2000] * 40, server)
    slow = result(LoadLevel.concurrency(1), [1000] * 10, server)
    lines = csv_text([fast, slow]).splitlines()
    # network: 1000 - 10 - 5 = 985 µs client wait, minus 123.456 queue + 301.999 compute
    assert lines[1] == "1,10,10,559,123,1,300,0,5,1000,1000,1000,1000"
    assert lines[2].startswith("4,40,10,")


def test_json_records_are_the_csv_rows_plus_counts() -> None:
    made = [result(LoadLevel.request_rate(12.5), [700] * 9, server_stats())]
    [record] = json_records(made, verbose_csv=True)
    header = csv_text(made, verbose_csv=True).splitlines()[0].split(",")
    assert list(record)[: len(header)] == header
    assert record["Request Rate"] == 12.5 and record["p99 latency"] == 700
    assert record["Request Count"] == 9 and record["Errors"] == 0 and record["Stable"] is True
    json.dumps(record)  # JSON-ready


def test_summary_lines_are_perf_analyzers() -> None:
    made = result(LoadLevel.concurrency(4), [812] * 4)
    assert summary_line(made) == "Concurrency: 4, throughput: 4 infer/sec, latency 812 usec"
    rate = result(LoadLevel.request_rate(250), [100] * 3, percentile=99)
    assert summary_text([rate]).splitlines() == [
        "Inferences/Second vs. Client p99 Batch Latency",
        "Request Rate: 250, throughput: 3 infer/sec, latency 100 usec",
    ]


# ------------------------------------------------------------------ knee and SLA
def level_of(found: StepResult | None) -> LoadLevel | None:
    """The load level of a knee / best-under-SLA pick (None where there is none)."""
    return None if found is None else found.level


SATURATING = [(1, 500.0, 1000), (2, 950.0, 1100), (4, 1800.0, 1300), (8, 1900.0, 2500),
              (16, 1950.0, 5000)]


def test_knee_is_the_level_before_throughput_stalls_while_p99_climbs() -> None:
    results = curve(SATURATING)
    assert level_of(knee(results)) == LoadLevel.concurrency(4)
    assert level_of(knee(list(reversed(results)))) == LoadLevel.concurrency(4)  # any order
    # 4 -> 8 gains 5.6 %: below 10 %, above 3 %; 8 -> 16 gains 2.6 % while p99 doubles
    assert level_of(knee(results, min_gain_pct=3)) == LoadLevel.concurrency(8)
    # 4 -> 8: p99 +92 %; 8 -> 16: p99 +100 %
    assert level_of(knee(results, max_p99_growth_pct=95)) == LoadLevel.concurrency(8)
    assert knee(results, max_p99_growth_pct=100) is None


def test_no_knee_while_throughput_keeps_growing() -> None:
    assert knee(curve([(1, 500.0, 1000), (2, 1000.0, 1050), (4, 1900.0, 1200)])) is None
    assert knee(curve([(1, 500.0, 1000)])) is None
    assert knee([]) is None


def test_flat_throughput_with_flat_p99_is_not_a_knee() -> None:
    assert knee(curve([(1, 500.0, 1000), (2, 505.0, 1010)])) is None


def test_best_under_sla_takes_the_most_throughput_meeting_p99() -> None:
    results = curve(SATURATING)
    assert level_of(best_under_sla(results, p99_us=2000)) == LoadLevel.concurrency(4)
    assert level_of(best_under_sla(results, p99_us=10_000)) == LoadLevel.concurrency(16)
    assert best_under_sla(results, p99_us=999) is None


def test_best_under_sla_skips_steps_with_errors() -> None:
    good, failing = curve([(1, 500.0, 1000), (2, 900.0, 1200)])
    failing = StepResult(**{**{f: getattr(failing, f) for f in failing.__dataclass_fields__},
                            "error_count": 3})
    assert best_under_sla([good, failing], p99_us=5000) is good


# ------------------------------------------------------------------ options and ranges
def test_ranges_follow_perf_analyzer() -> None:
    assert levels_from_range("concurrency", "1:4:2") == [LoadLevel.concurrency(c) for c in (1, 3)]
    assert levels_from_range("concurrency", "8") == [LoadLevel.concurrency(8)]
    assert levels_from_range("concurrency", "1:3") == [LoadLevel.concurrency(c) for c in (1, 2, 3)]
    rates = levels_from_range("request_rate", "10:30:10")
    assert [level.value for level in rates] == [10.0, 20.0, 30.0]
    assert [level.value for level in levels_from_range("request_rate", "0.5:1:0.1")][-1] == 1.0
    for bad in ("4:1", "1:2:0", "a", "1:2:3:4", ""):
        with pytest.raises(PerfError, match="invalid range"):
            levels_from_range("concurrency", bad)
    with pytest.raises(PerfError, match="whole number"):
        levels_from_range("concurrency", "0.5")


def test_options_refuse_what_cannot_be_measured() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"batch_size": 0}, "batch size"), ({"percentile": 100}, "percentile"),
        ({"input_data": "/absent.json"}, "neither 'random'"),
        ({"measurement_interval_ms": 0}, "measurement interval")]
    for values, message in cases:
        with pytest.raises(PerfError, match=message):
            PerfOptions("m", **values)


def test_shape_overrides() -> None:
    assert shape_overrides(["pixels:64", "ids:1,128"]) == {"pixels": (64,), "ids": (1, 128)}
    for bad in ("pixels", "pixels:0", "pixels:a", ":3"):
        with pytest.raises(PerfError, match="invalid --shape"):
            shape_overrides([bad])


def test_delay_tolerance_is_half_a_gap_or_a_millisecond() -> None:
    assert delay_tolerance_ns(100) == 5 * MS
    assert delay_tolerance_ns(10_000) == MS


# ------------------------------------------------------------------ input data files
INFO = ModelInfo("m", "", 8, (InputSpec("X", "FP32", (2, 2)), InputSpec("S", "BYTES", (-1,)),
                              InputSpec("O", "INT32", (1,), optional=True)))


def load(tmp_path: Path, document: object, shapes=None) -> list[dict]:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return load_input_data(str(path), INFO, shapes or {})


def test_input_data_forms(tmp_path: Path) -> None:
    serialized = b"".join(len(s).to_bytes(4, "little") + s for s in (b"ab", b"cde"))
    entries = load(tmp_path, {"data": [
        {"X": [1, 2, 3, 4], "S": {"content": ["hi"], "shape": [1]}, "model": "ignored"},
        [{"X": {"b64": base64.b64encode(np.arange(4, dtype="<f4").tobytes()).decode()},
          "S": {"b64": base64.b64encode(serialized).decode(), "shape": [2]}, "O": [7]}],
    ]})
    np.testing.assert_array_equal(entries[0]["X"], [[1, 2], [3, 4]])
    assert entries[0]["X"].dtype == np.float32 and entries[0]["S"].tolist() == [b"hi"]
    np.testing.assert_array_equal(entries[1]["X"], [[0, 1], [2, 3]])
    assert entries[1]["S"].tolist() == [b"ab", b"cde"] and entries[1]["O"].tolist() == [7]
    assert "O" not in entries[0]


@pytest.mark.parametrize(("document", "message"), [
    ({"rows": []}, "doesn't contain data field"),
    ({"data": [{"X": [1, 2, 3, 4], "S": ["a"]}]}, "variable-sized tensor \"S\""),
    ({"data": [{"S": ["a"]}]}, "missing tensor X"),
    ({"data": [{"X": [1, 2, 3], "S": ["a"]}]}, "Expected: 4 elements"),
    ({"data": [{"X": {"content": [1, 2, 3, 4], "shape": [4]}, "S": ["a"]}]}, "incompatible"),
    ({"data": [{"X": [1, 2, 3, 4], "S": ["a"], "Y": [1]}]}, "'Y' is not found"),
    ({"data": [{"X": {"b64": "AAAA"}, "S": ["a"]}]}, "not a multiple"),
    ({"data": [{"X": ["a", "b", "c", "d"], "S": ["a"]}]}, "do not fit FP32"),
    ({"data": [{"X": 3, "S": ["a"]}]}, "malformed"),
])
def test_input_data_errors_are_clear(tmp_path: Path, document: dict, message: str) -> None:
    with pytest.raises(PerfError, match=message):
        load(tmp_path, document, shapes={"S": [1]} if "variable" not in message else None)


def test_batches_stack_consecutive_entries_with_the_same_inputs(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"data": [{"X": [i] * 4, "S": [str(i)]} for i in range(3)]}))
    options = PerfOptions("m", input_data=str(path), batch_size=2, shapes={"S": [1]})
    requests = request_tensors(INFO, options)
    # 3 entries in batches of 2, round-robin: [0, 1], [2, 0], [1, 2]
    assert [r[0].data[:, 0, 0].tolist() for r in requests] == [[0, 1], [2, 0], [1, 2]]
    assert requests[0][1].data.tolist() == [[b"0"], [b"1"]] and requests[0][1].datatype == "BYTES"
    path.write_text(json.dumps({"data": [{"X": [1] * 4, "S": ["a"], "O": [1]},
                                         {"X": [2] * 4, "S": ["b"]}]}))
    with pytest.raises(PerfError, match="same inputs"):
        request_tensors(INFO, options)


def test_unreadable_input_data(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(PerfError, match="failed to read the input data file"):
        load_input_data(str(path), INFO, {})


# ------------------------------------------------------------------ model info and stats
def test_model_info_reads_grpc_json_and_refuses_sequences_and_decoupled() -> None:
    metadata = {"inputs": [{"name": "X", "datatype": "FP32", "shape": ["-1", "64"]}]}
    info = ModelInfo.from_json("m", "", metadata, {"config": {"max_batch_size": 8}})
    assert info.inputs == (InputSpec("X", "FP32", (64,)),) and info.max_batch_size == 8
    with pytest.raises(PerfError, match="sequence batcher"):
        ModelInfo.from_json("m", "", metadata, {"sequence_batching": {}})
    with pytest.raises(PerfError, match="decoupled"):
        ModelInfo.from_json("m", "", metadata, {"model_transaction_policy": {"decoupled": True}})


def test_stats_delta_picks_the_version_that_served() -> None:
    def snapshot(v1: int, v2: int) -> dict:
        return {"model_stats": [
            {"name": "m", "version": "1", "inference_stats": {"success": {"count": v1, "ns": v1 * 10}}},
            # gRPC's JSON: 64-bit counters as strings, zero fields left out
            {"name": "m", "version": "2", "inference_count": str(v2 * 2),
             "inference_stats": {"success": {"count": str(v2), "ns": str(v2 * 1000)},
                                 "queue": {"count": str(v2), "ns": str(v2 * 3000)}}},
        ]}

    delta = stats_delta(snapshot(5, 10), snapshot(5, 30), "m", "")
    assert delta is not None
    assert delta.version == "2" and delta.count("success") == 20 and delta.inference_count == 40
    assert delta.avg_us("queue") == 3 and delta.avg_us("compute_infer") == 0
    pinned = stats_delta(snapshot(5, 10), snapshot(5, 30), "m", "1")
    assert pinned is not None and pinned.count("success") == 0
    assert stats_delta(snapshot(5, 10), snapshot(5, 10), "m", "") is None
    assert stats_delta(snapshot(5, 10), snapshot(5, 30), "other", "") is None


def test_the_public_surface_is_exactly_all() -> None:
    public = {name for name, value in vars(workbench.perf).items()
              if not name.startswith("_") and not isinstance(value, ModuleType)}
    assert public == set(workbench.perf.__all__)
