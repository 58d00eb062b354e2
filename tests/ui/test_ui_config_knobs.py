"""Form knobs <-> config.pbtxt text: only the changed values are rewritten; comments, indent
and list style stay, inside rewritten blocks too; knobs that do not apply to a model (a
sequence-batched one, an ensemble, another backend's parameters) are refused with the reason
or map to the field that applies."""

from __future__ import annotations

import difflib
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf import text_format

from workbench import Server
from workbench.config_edits.knobs import (
    SEQUENCE_SCHEDULED,
    ConfigKnobs,
    apply_knobs,
    knob_reasons,
    parse_text,
    read_knobs,
    set_knobs,
    with_knob,
)
from workbench.config_edits.pbtxt_spans import top_level_spans

TEXT = """\
name: "m"  # the model
backend: "onnxruntime"
max_batch_size: 8
# two instances: one per core
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { }
parameters { key: "x{#" value: { string_value: "}#[" } }
"""


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                   lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_spans_cover_each_top_level_field_despite_brackets_in_strings_and_comments() -> None:
    spans = top_level_spans(TEXT)
    assert [s.name for s in spans] == ["name", "backend", "max_batch_size", "instance_group",
                                       "dynamic_batching", "parameters"]
    assert TEXT[spans[-1].start:spans[-1].end].endswith('string_value: "}#[" } }')
    assert TEXT[spans[0].start:spans[0].end] == 'name: "m"'


def test_one_knob_rewrites_one_line_and_keeps_comments() -> None:
    after = with_knob(TEXT, max_batch_size=16)
    assert changed_lines(TEXT, after) == ["-max_batch_size: 8", "+max_batch_size: 16"]
    assert read_knobs(parse_text(after)).max_batch_size == 16


def test_batcher_knobs_rewrite_the_batcher_block_only() -> None:
    after = with_knob(TEXT, preferred_batch_sizes=(4, 8), max_queue_delay_us=250)
    assert changed_lines(TEXT, after) == [  # the empty block opens; lists as the file writes them
        "-dynamic_batching { }", "+dynamic_batching {", "+  preferred_batch_size: [ 4, 8 ]",
        "+  max_queue_delay_microseconds: 250", "+}"]
    assert "# two instances: one per core" in after and "# the model" in after


#: a hand-written config: 4-space indent, a comment inside the batcher, a list of sizes
HAND_WRITTEN = """\
name: "m"
backend: "onnxruntime"
max_batch_size: 8
dynamic_batching {
    # full batches first: the GPU is idle between them
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 100  # measured on the T4
}
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


def test_a_rewritten_block_keeps_its_comments_indent_and_list_style() -> None:
    """Tuning's Apply best wrote this block as text_format prints it: the comment inside it
    deleted, 4-space indent made 2, `[ 4, 8 ]` made repeated fields (issue 30)."""
    after = with_knob(HAND_WRITTEN, max_queue_delay_us=200, preferred_batch_sizes=(2, 4))
    assert changed_lines(HAND_WRITTEN, after) == [
        "-    preferred_batch_size: [ 4, 8 ]", "-    max_queue_delay_microseconds: 100  # measured on the T4",
        "+    preferred_batch_size: [ 2, 4 ]", "+    max_queue_delay_microseconds: 200  # measured on the T4"]
    added = with_knob(HAND_WRITTEN, priority_levels=2, instance_count=3)
    assert changed_lines(HAND_WRITTEN, added) == [  # new fields at the block's own indent
        "+    priority_levels: 2", "+    default_priority_level: 2",
        "-instance_group [ { count: 2 kind: KIND_CPU } ]", "+instance_group [ { count: 3 kind: KIND_CPU } ]"]
    assert read_knobs(parse_text(added)).priority_levels == 2


def test_a_one_item_list_says_nothing_of_the_separator() -> None:
    """`dims: [ 16 ]` and `[ 8 ]` made the knobs write `[ 4,8 ]` beside the file's `[ 0, 1 ]`
    (new-user trial of issue 30): a list of one item has no separator to copy."""
    text = ('name: "m"\nmax_batch_size: 8\ninput [ { name: "I" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
            "dynamic_batching {\n  preferred_batch_size: [ 8 ]\n}\n")
    assert "preferred_batch_size: [ 4, 8 ]" in with_knob(text, preferred_batch_sizes=(4, 8))
    added = with_knob(text.replace("  preferred_batch_size: [ 8 ]\n", ""), preferred_batch_sizes=(4, 8))
    assert "preferred_batch_size: [ 4, 8 ]" in added
    tight = text.replace("[ 16 ]", "[ 16,2 ]").replace("[ 8 ]", "[8]")
    assert "preferred_batch_size: [4,8]" in with_knob(tight, preferred_batch_sizes=(4, 8))


def test_repeated_field_style_stays_repeated_fields() -> None:
    text = 'name: "m"\nmax_batch_size: 8\ndynamic_batching {\n  preferred_batch_size: 4\n  preferred_batch_size: 8\n}\n'
    after = with_knob(text, preferred_batch_sizes=(2, 4, 8))
    assert after == text.replace("  preferred_batch_size: 4\n",
                                 "  preferred_batch_size: 2\n  preferred_batch_size: 4\n")
    assert read_knobs(parse_text(after)).preferred_batch_sizes == (2, 4, 8)


ACCUMULATOR = """\
name: "accumulator"
max_batch_size: 8
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
}
"""


def test_dynamic_batcher_knobs_do_not_apply_to_a_sequence_batched_model() -> None:
    """The queue-delay knob inserted `dynamic_batching {}` beside `sequence_batching` (which
    the validator refused, issue 30): refused with the reason now, nothing inserted."""
    config = parse_text(ACCUMULATOR)
    reasons = knob_reasons(config)
    assert reasons["dynamic_batching"] == SEQUENCE_SCHEDULED
    assert {"max_queue_delay_us", "preferred_batch_sizes", "priority_levels",
            "response_cache"} <= set(reasons)
    assert "max_batch_size" not in reasons and "instance_count" not in reasons
    for knob in ({"max_queue_delay_us": 100}, {"dynamic_batching": True}, {"response_cache": True}):
        with pytest.raises(ValueError, match="does not apply to model 'accumulator'"):
            with_knob(ACCUMULATOR, **knob)
    after = with_knob(ACCUMULATOR, max_batch_size=4, instance_count=2)  # these apply
    assert "dynamic_batching" not in after and parse_text(after).sequence_batching.max_sequence_idle_microseconds


def test_queue_delay_maps_to_the_sequence_batchers_oldest_strategy() -> None:
    oldest = ACCUMULATOR.replace("sequence_batching {\n",
                                 "sequence_batching {\n  oldest { max_candidate_sequences: 4 }\n")
    assert "max_queue_delay_us" not in knob_reasons(parse_text(oldest))
    after = with_knob(oldest, max_queue_delay_us=300, preferred_batch_sizes=(4,))
    assert changed_lines(oldest, after) == [
        "-  oldest { max_candidate_sequences: 4 }",
        "+  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 300 }"]
    config = parse_text(after)
    assert config.sequence_batching.oldest.max_queue_delay_microseconds == 300
    assert not config.HasField("dynamic_batching")
    assert read_knobs(config).max_queue_delay_us == 300
    direct = ACCUMULATOR.replace("sequence_batching {\n",
                                 "sequence_batching {\n  direct { minimum_slot_utilization: 0.5 }\n")
    after = with_knob(direct, max_queue_delay_us=50)
    assert parse_text(after).sequence_batching.direct.max_queue_delay_microseconds == 50


def test_an_ensemble_has_no_batcher_or_instance_knobs() -> None:
    text = 'name: "e"\nplatform: "ensemble"\nmax_batch_size: 8\nensemble_scheduling { step [ ] }\n'
    reasons = knob_reasons(parse_text(text))
    assert {"dynamic_batching", "max_queue_delay_us", "instance_count", "instance_kind"} <= set(reasons)
    assert with_knob(text, max_batch_size=4) == text.replace("max_batch_size: 8", "max_batch_size: 4")
    with pytest.raises(ValueError, match="ensemble"):
        with_knob(text, instance_count=2)


def test_every_knob_round_trips() -> None:
    knobs = ConfigKnobs(max_batch_size=4, dynamic_batching=True, preferred_batch_sizes=(2,),
                        max_queue_delay_us=100, priority_levels=3, instance_count=1,
                        instance_kind="KIND_GPU", response_cache=True)
    after = set_knobs(TEXT, knobs)
    assert read_knobs(parse_text(after)) == knobs
    config = parse_text(after)
    assert config.dynamic_batching.default_priority_level == 3  # in 1..priority_levels
    assert config.parameters["x{#"].string_value == "}#["  # untouched field intact


def test_turning_features_off_removes_their_fields() -> None:
    after = with_knob(TEXT, dynamic_batching=False)
    assert changed_lines(TEXT, after) == ["-dynamic_batching { }"]
    assert not parse_text(after).HasField("dynamic_batching")


def test_a_field_written_several_times_is_replaced_once() -> None:
    text = 'name: "m"\ninstance_group { count: 1 }\nmax_batch_size: 2\ninstance_group { count: 3 }\n'
    after = with_knob(text, instance_count=5)
    groups = parse_text(after).instance_group
    assert [g.count for g in groups] == [5, 3]  # the first group is the form's; others kept
    assert after.count("instance_group") == 2 and after.index("max_batch_size") > after.index("count: 5")


def test_a_missing_field_is_appended_and_an_inline_comment_stays() -> None:
    text = 'name: "m"\nmax_batch_size: 8  # keep me\n'
    after = with_knob(text, max_batch_size=2, response_cache=True)
    assert "max_batch_size: 2  # keep me" in after
    assert after.endswith("response_cache {\n  enable: true\n}\n")


def test_unchanged_knobs_leave_the_text_identical() -> None:
    assert set_knobs(TEXT, read_knobs(parse_text(TEXT))) == TEXT


def test_text_that_does_not_parse_is_refused() -> None:
    with pytest.raises(text_format.ParseError):
        with_knob("max_batch_size: {", max_batch_size=2)
    with pytest.raises(ValueError, match="unbalanced"):
        top_level_spans("a { b: 1")
    with pytest.raises(ValueError):
        top_level_spans('a: "open')


def test_unknown_instance_kind_is_an_error() -> None:
    with pytest.raises(ValueError):
        apply_knobs(parse_text(TEXT), ConfigKnobs(instance_kind="KIND_TPU"))


def test_knob_values_name_every_knob_with_its_type() -> None:
    """KnobValues (the typed keywords of with_knob / load_with) and ConfigKnobs' fields are
    one list: a knob added to one and not the other is caught here."""
    from dataclasses import fields
    from typing import get_type_hints

    from workbench.config_edits.knobs import KnobValues

    assert get_type_hints(KnobValues) == get_type_hints(ConfigKnobs)
    assert list(KnobValues.__annotations__) == [f.name for f in fields(ConfigKnobs)]


#: knob changes tried on every sample config (those that apply to it)
CHANGES = (
    {"max_batch_size": 4}, {"max_queue_delay_us": 250}, {"preferred_batch_sizes": (2, 4)},
    {"priority_levels": 2, "instance_count": 3}, {"instance_kind": "KIND_CPU", "response_cache": True},
    {"dynamic_batching": False, "max_batch_size": 0}, {"preferred_batch_sizes": (), "max_queue_delay_us": 0},
    {"intra_op_threads": 3}, {"intra_op_threads": 0}, {"inter_op_threads": 2}, {"streams": 4},
    {"intra_op_threads": 0, "streams": 0},
)


def test_every_rewritten_sample_config_parses_to_exactly_the_changed_config(sample_repository: Path) -> None:
    """The in-place rewrite is exact: the text parses to the message the knobs ask for, for
    every sample's hand-written config (lists, one-line blocks, nested blocks, comments)."""
    tried = 0
    for path in sorted(sample_repository.glob("*/config.pbtxt")):
        text = path.read_text()
        config = parse_text(text)
        reasons, current = knob_reasons(config), read_knobs(config)
        for change in CHANGES:
            if reasons.keys() & change.keys():
                continue
            knobs = replace(current, **change)
            assert parse_text(set_knobs(text, knobs)) == apply_knobs(config, knobs), (path.parent.name, change)
            tried += 1
    assert tried > 50


# ----------------------------------------------------------------- backend knobs (parameters)
#: a hand-written ONNX Runtime config: comments around and inside its parameters, a
#: multi-line entry, other parameters the knobs do not own
ORT_PARAMETERS = """\
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
# ORT tuning, measured on 4 cores
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }  # one core each
parameters {
    key: "execution_mode"  # sequential
    value: { string_value: "0" }
}
# memory: arena off for the small model
parameters { key: "enable_mem_arena" value: { string_value: "false" } }
"""


def test_thread_knobs_are_the_backends_own_parameters() -> None:
    cases = {  # backend / platform line -> the keys the engine reads for intra-, inter-op threads
        'backend: "onnxruntime"': ("intra_op_thread_count", "inter_op_thread_count"),
        'platform: "onnxruntime_onnx"': ("intra_op_thread_count", "inter_op_thread_count"),
        'backend: "pytorch"': ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"),
        'platform: "pytorch_libtorch"': ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"),
    }
    for line, (intra, inter) in cases.items():
        text = f'name: "m"\n{line}\nmax_batch_size: 8\n'
        after = with_knob(text, intra_op_threads=2, inter_op_threads=1)
        assert after == text + (f'parameters {{ key: "{inter}" value: {{ string_value: "1" }} }}\n'
                                f'parameters {{ key: "{intra}" value: {{ string_value: "2" }} }}\n'), line
        knobs = read_knobs(parse_text(after))
        assert (knobs.intra_op_threads, knobs.inter_op_threads, knobs.streams) == (2, 1, 0)
        assert with_knob(after, intra_op_threads=0, inter_op_threads=0) == text  # back to the default


def test_openvino_has_intra_op_threads_and_streams_under_either_name() -> None:
    text = 'name: "m"\nbackend: "openvino"\nparameters { key: "CPU_THROUGHPUT_STREAMS" value: { string_value: "2" } }\n'
    knobs = read_knobs(parse_text(text))
    assert (knobs.streams, knobs.intra_op_threads) == (2, 0)
    after = with_knob(text, streams=4, intra_op_threads=3)  # the file's older name stays
    assert changed_lines(text, after) == [
        '-parameters { key: "CPU_THROUGHPUT_STREAMS" value: { string_value: "2" } }',
        '+parameters { key: "CPU_THROUGHPUT_STREAMS" value: { string_value: "4" } }',
        '+parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "3" } }']
    fresh = with_knob('name: "m"\nbackend: "openvino"\n', streams=1)
    assert parse_text(fresh).parameters["NUM_STREAMS"].string_value == "1"
    both = text + 'parameters { key: "NUM_STREAMS" value: { string_value: "3" } }\n'
    assert read_knobs(parse_text(both)).streams == 3  # the current name first
    written = parse_text(with_knob(both, streams=5)).parameters  # one spelling left, the value the engine gets
    assert {k: v.string_value for k, v in written.items()} == {"NUM_STREAMS": "5"}


def test_a_commented_configs_other_parameters_stay_byte_for_byte() -> None:
    after = with_knob(ORT_PARAMETERS, intra_op_threads=4, inter_op_threads=2)
    assert changed_lines(ORT_PARAMETERS, after) == [
        '-parameters { key: "intra_op_thread_count" value: { string_value: "1" } }  # one core each',
        '+parameters { key: "intra_op_thread_count" value: { string_value: "4" } }  # one core each',
        '+parameters { key: "inter_op_thread_count" value: { string_value: "2" } }']
    assert after.endswith('string_value: "false" } }\n'  # the new entry goes after the last one
                          'parameters { key: "inter_op_thread_count" value: { string_value: "2" } }\n')
    removed = with_knob(ORT_PARAMETERS, intra_op_threads=0)
    assert changed_lines(ORT_PARAMETERS, removed) == [
        '-parameters { key: "intra_op_thread_count" value: { string_value: "1" } }  # one core each',
        "+  # one core each"]  # a comment after the entry stays, as after other removed fields
    config = parse_text(removed)
    assert "intra_op_thread_count" not in config.parameters
    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "execution_mode": "0", "enable_mem_arena": "false"}


def test_a_value_that_is_not_a_count_stays_unless_the_knob_changes() -> None:
    text = 'name: "m"\nbackend: "openvino"\nparameters { key: "NUM_STREAMS" value: { string_value: "AUTO" } }\n'
    assert read_knobs(parse_text(text)).streams == 0
    assert with_knob(text, streams=0) == text and "AUTO" in with_knob(text, intra_op_threads=2)
    assert 'string_value: "2" }' in with_knob(text, streams=2).splitlines()[2]
    with pytest.raises(ValueError, match="streams must be >= 0"):
        with_knob(text, streams=-1)


def test_backend_knobs_do_not_apply_to_other_backends_nor_ensembles() -> None:
    python = parse_text('name: "m"\nbackend: "python"\n')
    reasons = knob_reasons(python)
    assert reasons["intra_op_threads"] == ("the python backend has no intra-op threads parameter: "
                                           "it is a knob of onnxruntime, pytorch and openvino models only")
    assert "onnxruntime and pytorch models only" in reasons["inter_op_threads"]
    assert reasons["streams"].endswith("it is a knob of openvino models only")
    assert set(knob_reasons(parse_text('name: "m"\nbackend: "onnxruntime"\n'))) == {"streams"}
    assert set(knob_reasons(parse_text('name: "m"\nbackend: "openvino"\n'))) == {"inter_op_threads"}
    assert "platform tensorflow_savedmodel has no" in knob_reasons(
        parse_text('name: "m"\nplatform: "tensorflow_savedmodel"\n'))["streams"]
    with pytest.raises(ValueError, match="inter-op threads does not apply to model 'm': the python backend"):
        with_knob('name: "m"\nbackend: "python"\n', inter_op_threads=2)
    ensemble = parse_text('name: "e"\nplatform: "ensemble"\nensemble_scheduling { step [ ] }\n')
    assert {knob_reasons(ensemble)[k] for k in ("intra_op_threads", "inter_op_threads", "streams")} == {
        "an ensemble: its composing models have backends and their parameters, the ensemble has none"}


def test_a_map_entry_in_a_list_or_written_twice_is_rewritten_whole() -> None:
    listed = ('name: "m"\nbackend: "onnxruntime"\nparameters [ { key: "a" value: { string_value: "x" } }, '
              '{ key: "intra_op_thread_count" value: { string_value: "1" } } ]\n')
    after = with_knob(listed, intra_op_threads=2)
    assert {k: v.string_value for k, v in parse_text(after).parameters.items()} == {
        "a": "x", "intra_op_thread_count": "2"}
    twice = ('name: "m"\nbackend: "onnxruntime"\n'
             'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
             'parameters { key: "intra_op_thread_count" value: { string_value: "3" } }\n')
    assert read_knobs(parse_text(twice)).intra_op_threads == 3  # the last one, as the parser keeps
    assert parse_text(with_knob(twice, intra_op_threads=5)).parameters["intra_op_thread_count"].string_value == "5"


def test_a_changed_parameter_is_rewritten_inside_its_entry_only() -> None:
    """A map (``parameters``) is edited entry by entry: it was printed whole, every entry on
    lines of its own, and the comments between the entries lost."""
    from workbench.config_edits.pbtxt_edit import rewrite_message

    before = parse_text(ORT_PARAMETERS)
    after = parse_text(ORT_PARAMETERS)
    after.parameters["execution_mode"].string_value = "1"
    rewritten = rewrite_message(ORT_PARAMETERS, before, after)
    assert changed_lines(ORT_PARAMETERS, rewritten) == [
        '-    value: { string_value: "0" }', '+    value: { string_value: "1" }']


async def test_a_thread_knob_is_a_load_time_override_the_engine_serves(server: Server) -> None:
    """The tuner's path: the served digits_mlp reloaded with other thread counts, the file
    untouched; 0 takes the parameter out (ORT's default)."""
    from workbench.config_edits.overrides import load_with

    await load_with(server, "digits_mlp", intra_op_threads=2, inter_op_threads=1)
    served = await server.model_config("digits_mlp")
    assert {k: served.parameters[k].string_value
            for k in ("intra_op_thread_count", "inter_op_thread_count")} == {
        "intra_op_thread_count": "2", "inter_op_thread_count": "1"}
    await load_with(server, "digits_mlp", intra_op_threads=0)
    assert "intra_op_thread_count" not in (await server.model_config("digits_mlp")).parameters
