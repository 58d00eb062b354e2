"""The Tuning tab's form text, parsed: load levels (a range or a list) and candidate settings."""

from __future__ import annotations

import pytest

from workbench.perf import LoadLevel, PerfError
from workbench.ui.tuning_settings import MAX_LEVELS, parse_candidates, parse_levels


def test_levels_from_a_list_or_a_range() -> None:
    assert parse_levels("concurrency", "1, 2 4,8") == [LoadLevel.concurrency(c) for c in (1, 2, 4, 8)]
    assert parse_levels("concurrency", "2:6:2") == [LoadLevel.concurrency(c) for c in (2, 4, 6)]
    assert parse_levels("request_rate", "12.5, 50") == [LoadLevel.request_rate(12.5),
                                                        LoadLevel.request_rate(50)]


@pytest.mark.parametrize("mode, text, message", [
    ("concurrency", "  ", "at least one load level"),
    ("concurrency", "1, x", "'x' is not a number"),
    ("concurrency", "2.5", "whole number"),
    ("request_rate", "0", "> 0 requests per second"),
    ("concurrency", "4:1", "the end >= the start"),
    ("concurrency", f"1:{MAX_LEVELS + 1}", f"at most {MAX_LEVELS} per sweep"),
    ("bursts", "1", "concurrency or request_rate"),
])
def test_bad_levels_are_refused(mode: str, text: str, message: str) -> None:
    with pytest.raises(PerfError, match=message):
        parse_levels(mode, text)


def test_candidates_one_per_line_with_typed_values() -> None:
    candidates = parse_candidates(
        "# delays\nmax_queue_delay_us=100\n\n  max_queue_delay_us=500 preferred_batch_sizes=4,8  \n"
        "instance_count=2 instance_kind=KIND_CPU dynamic_batching=off response_cache=true # two\n")
    assert [c.label for c in candidates] == [
        "max_queue_delay_us=100", "max_queue_delay_us=500 preferred_batch_sizes=4,8",
        "instance_count=2 instance_kind=KIND_CPU dynamic_batching=false response_cache=true"]
    assert candidates[1].values == {"max_queue_delay_us": 500, "preferred_batch_sizes": (4, 8)}
    assert candidates[2].values == {"instance_count": 2, "instance_kind": "KIND_CPU",
                                    "dynamic_batching": False, "response_cache": True}
    assert parse_candidates("") == []


def test_candidates_may_set_the_backend_thread_knobs() -> None:
    [candidate] = parse_candidates("intra_op_threads=2 inter_op_threads=0 streams=4")
    assert candidate.values == {"intra_op_threads": 2, "inter_op_threads": 0, "streams": 4}
    with pytest.raises(ValueError, match="intra_op_threads must be >= 0"):
        parse_candidates("intra_op_threads=-1")


@pytest.mark.parametrize("text, message", [
    ("max_queue_delay_us", "is not knob=value"),
    ("queue_delay=3", "unknown knob 'queue_delay'"),
    ("max_queue_delay_us=soon", "'soon' is not an integer"),
    ("max_queue_delay_us=-1", "must be >= 0"),
    ("instance_count=0", "must be >= 1"),
    ("preferred_batch_sizes=0,4", "integers >= 1"),
    ("max_batch_size=1,2", "is not one integer"),
    ("dynamic_batching=maybe", "true or false"),
    ("instance_kind=KIND_TPU", "one of KIND_AUTO"),
    ("instance_count=1 instance_count=2", "set twice"),
    ("instance_count=2\ninstance_count=2", "line 2: 'instance_count=2' is listed twice"),
])
def test_bad_candidates_are_refused_with_their_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_candidates(text)
