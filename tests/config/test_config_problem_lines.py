"""A semantic problem of a config text is marked on the line of the field it is about, as
the loader's own validation reports it (the Config tab's editor marks that line): the second
``name:`` of a duplicate input / output, the ``dims`` / ``data_type`` of the entry the
message names, an instance group's ``count``, a dotted field (issue 16, a new user's finding:
a duplicate output name was marked on another line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import Server, ServerOptions
from workbench.config.pbtxt_fields import field_lines
from workbench.config.problems import locate_message
from workbench.testing.reload import write_add_sub

#: add_sub's config, one field a line; {…} marks where each case changes it
CONFIG = """name: "add_sub"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""


def changed(old: str, new: str, occurrence: int = 1) -> str:
    """:data:`CONFIG` with its ``occurrence``-th ``old`` replaced by ``new``."""
    parts = CONFIG.split(old)
    assert len(parts) > occurrence, old
    return old.join(parts[:occurrence]) + new + old.join(parts[occurrence:])


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line of ``text`` containing ``needle``."""
    found = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return found[occurrence - 1]


CASES = {
    # the second entry named OUTPUT0 (OUTPUT1 renamed): its name line, not the first's
    "duplicate output": (changed('name: "OUTPUT1"', 'name: "OUTPUT0"'), 'name: "OUTPUT0"', 2),
    "duplicate input": (changed('name: "INPUT1"', 'name: "INPUT0"'), 'name: "INPUT0"', 2),
    # INPUT1's dims (INPUT0's dims come first in the text)
    "bad dims of the second input": (changed("dims: [ 16 ]", "dims: [ 16, -2 ]", 2), "dims: [ 16, -2 ]", 1),
    # the reshape added to OUTPUT1 (16 elements reshaped to 20)
    "reshape of the second output": (changed("dims: [ 16 ]", "dims: [ 16 ]\n    reshape: { shape: [ 4, 5 ] }", 4),
                                     "reshape:", 1),
    "dotted field": (CONFIG + "version_policy: {\n  latest: {\n    num_versions: 0\n  }\n}\n",
                     "num_versions: 0", 1),
}


@pytest.fixture
async def server(tmp_path: Path):
    write_add_sub(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                                    load_model=["add_sub"])) as running:
        yield running


async def test_the_problem_is_marked_on_its_fields_line(server: Server) -> None:
    for case, (text, needle, occurrence) in CASES.items():
        [problem] = await server.config_files.validate_model_config_text("add_sub", text)
        assert problem.kind == "semantic", case
        assert problem.line == line_of(text, needle, occurrence), (case, problem)


def test_an_instance_groups_field() -> None:
    text = changed("kind: KIND_CPU", "kind: KIND_GPU")
    assert locate_message(text, "instance group add_sub_0 of model add_sub has kind KIND_GPU but no "
                                "GPUs are available") == line_of(text, "kind: KIND_GPU")
    assert locate_message(text, "instance group add_sub_0 of model add_sub must specify a "
                                "non-negative 'count', got -1") == line_of(text, "count: 1")


def test_messages_without_structure_keep_the_word_rules() -> None:
    assert locate_message(CONFIG, "'max_batch_size' must be non-negative value for add_sub") == 3
    assert locate_message(CONFIG, "something about nothing here") is None
    # an input and an output of one name: "model output 'X'" is the output's line
    text = changed('name: "OUTPUT1"', 'name: "INPUT1"')
    assert locate_message(text, "model output 'INPUT1' must specify 'dims' for add_sub") == \
        line_of(text, 'name: "INPUT1"', 2) + 2


def test_field_lines_of_lists_blocks_and_comments() -> None:
    fields = {f.path: (f.line, f.value) for f in field_lines(
        'name: "m"  # "x" {\ninput [ { name: "a" dims: [1, 2] } ]\noutput < name: \'b\' >\n')}
    assert fields[(("name", 0),)] == (1, "m")
    assert fields[(("input", 0), ("dims", 1))] == (2, "2")
    assert fields[(("output", 0), ("name", 0))] == (3, "b")
