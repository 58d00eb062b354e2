"""Tiny real ONNX models and model repositories for tests.

Every model here is a real ONNX graph built with ``onnx.helper`` and served by the
real onnxruntime backend; nothing is mocked.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def write_model(repo: Path, name: str, config: str | None, graph: onnx.GraphProto,
                versions: tuple[int, ...] = (1,)) -> Path:
    """Write ``<repo>/<name>/config.pbtxt`` (unless None) and ``<v>/model.onnx`` per version."""
    folder = repo / name
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    for version in versions:
        _save(graph, folder / str(version) / "model.onnx")
    return folder


def add_sub_graph(elem: int = TensorProto.FLOAT, width: int | str = 16) -> onnx.GraphProto:
    """INPUT0, INPUT1 [batch, width] -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    dims = ["batch", width]
    inputs = [helper.make_tensor_value_info(f"INPUT{i}", elem, dims) for i in range(2)]
    outputs = [helper.make_tensor_value_info(f"OUTPUT{i}", elem, dims) for i in range(2)]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return helper.make_graph(nodes, "add_sub", inputs, outputs)


def identity_graph(elem: int, dims: list, name: str = "identity") -> onnx.GraphProto:
    """INPUT0 -> OUTPUT0 unchanged, for any element type (strings included)."""
    return helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", elem, dims)],
        [helper.make_tensor_value_info("OUTPUT0", elem, dims)],
    )



def reshape_config(name: str, backend: str, max_batch_size: int, dims: str, reshape: str,
                   tensors: tuple[str, str] = ("INPUT0", "OUTPUT0")) -> str:
    """A one-input one-output FP32 model config whose input and output both have ``dims`` and
    ``reshape { shape }`` (comma-separated, "" for an empty reshape). ``backend`` may be a
    ``platform`` too (``pytorch_libtorch``, ``tensorflow_savedmodel``)."""
    field = "platform" if "_" in backend else "backend"
    io = f'data_type: TYPE_FP32 dims: [ {dims} ] reshape: {{ shape: [ {reshape} ] }}'
    return (f'name: "{name}"\n{field}: "{backend}"\nmax_batch_size: {max_batch_size}\n'
            f'input [ {{ name: "{tensors[0]}" {io} }} ]\noutput [ {{ name: "{tensors[1]}" {io} }} ]\n')

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

#: wire datatype -> ONNX element type, for the identity models of :func:`build_test_repository`.
IDENTITY_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}


def build_test_repository(repo: Path) -> Path:
    """A repository of small models covering the serving core's cases.

    - ``add_sub``: FP32 [-1,16] x2 -> sum, difference; max_batch_size 8, 2 instances.
    - ``identity_fp32``: identity [-1,-1], config auto-completed from the graph (no config.pbtxt).
    - ``add_sub_any``: add_sub over [-1,-1] (auto-completed); unequal widths fail inside ORT.
    - ``fixed_shape``: max_batch_size 0, FP32 [2,3] in and out, with a ``reshape`` to [6].
    - ``versioned``: add_sub in versions 1, 2 and 3 with ``version_policy: all``.
    """
    write_model(repo, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    write_model(repo, "identity_fp32", None, identity_graph(TensorProto.FLOAT, ["batch", "n"]))
    write_model(repo, "add_sub_any", None, add_sub_graph(width="n"))
    write_model(repo, "fixed_shape", FIXED_SHAPE_CONFIG, identity_graph(TensorProto.FLOAT, [6]))
    versioned = ADD_SUB_CONFIG.replace('"add_sub"', '"versioned"') + "version_policy: { all {} }\n"
    write_model(repo, "versioned", versioned, add_sub_graph(), versions=(1, 2, 3))
    return repo


def build_datatype_repository(repo: Path) -> Path:
    """One auto-completed identity model per Triton datatype: ``identity_<type>``, [-1,-1]."""
    for wire, elem in IDENTITY_TYPES.items():
        write_model(repo, f"identity_{wire.lower()}", None, identity_graph(elem, ["batch", "n"]))
    return repo


FIXED_SHAPE_CONFIG = """
name: "fixed_shape"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape: { shape: [ 6 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 6 ] } ]
"""


def add_broken_models(repo: Path) -> Path:
    """Add models that must fail to load without disturbing the others.

    - ``broken_syntax``: config.pbtxt that does not parse (line 3).
    - ``broken_onnx``: a valid config whose model.onnx is not an ONNX file.
    - ``wrong_dtype``: config says INT32 where the graph has FP32.
    - ``wrong_dims``: config says dims [ 15 ] where the graph has [batch, 16].
    """
    bad = repo / "broken_syntax"
    (bad / "1").mkdir(parents=True, exist_ok=True)
    (bad / "config.pbtxt").write_text('name: "broken_syntax"\nbackend: "onnxruntime"\nmax_batch_size: [ 8\n')
    _save(add_sub_graph(), bad / "1" / "model.onnx")
    onnx_bad = repo / "broken_onnx"
    (onnx_bad / "1").mkdir(parents=True, exist_ok=True)
    (onnx_bad / "config.pbtxt").write_text(ADD_SUB_CONFIG.replace('"add_sub"', '"broken_onnx"'))
    (onnx_bad / "1" / "model.onnx").write_bytes(b"this is not an onnx file")
    wrong = ADD_SUB_CONFIG.replace('"add_sub"', '"wrong_dtype"').replace(
        'name: "INPUT0" data_type: TYPE_FP32', 'name: "INPUT0" data_type: TYPE_INT32'
    )
    write_model(repo, "wrong_dtype", wrong, add_sub_graph())
    narrow = ADD_SUB_CONFIG.replace('"add_sub"', '"wrong_dims"').replace(
        'name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ]', 'name: "INPUT1" data_type: TYPE_FP32 dims: [ 15 ]'
    )
    write_model(repo, "wrong_dims", narrow, add_sub_graph())
    return repo


def accumulator_graph() -> onnx.GraphProto:
    """A stateful running sum for the sequence batcher, all FP32 [batch, 1]:
    ``OUTPUT = (1 - START) * SUM_IN + INPUT`` and ``SUM_OUT = OUTPUT`` (implicit state)."""
    f32 = TensorProto.FLOAT
    names = ("INPUT", "START", "SUM_IN")
    inputs = [helper.make_tensor_value_info(n, f32, ["batch", 1]) for n in names]
    outputs = [helper.make_tensor_value_info(n, f32, ["batch", 1]) for n in ("OUTPUT", "SUM_OUT")]
    one = helper.make_tensor("one", f32, [1], [1.0])
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["keep"]),
        helper.make_node("Mul", ["keep", "SUM_IN"], ["carried"]),
        helper.make_node("Add", ["carried", "INPUT"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["SUM_OUT"]),
    ]
    return helper.make_graph(nodes, "accumulator", inputs, outputs, initializer=[one])


ACCUMULATOR_CONFIG = """
name: "accumulator"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
}
"""


SCORES_CONFIG = """
name: "scores"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 5 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 5 ] label_filename: "labels.txt" } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

SCORES_INT_CONFIG = """
name: "scores_int"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 6 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 6 ] } ]
"""

#: labels of ``scores``; class 4 has none (Triton then prints ``<value>:<index>``)
SCORES_LABELS = ["cat", "dog", "bird", "fish"]


def build_classification_repository(repo: Path) -> Path:
    """Models for the classification extension (all identities, so scores are the inputs).

    - ``scores``: FP32 [-1, 5], max_batch_size 8, ``label_filename: "labels.txt"``
      (:data:`SCORES_LABELS`, none for class 4).
    - ``scores_int``: INT32 [6], max_batch_size 0, no labels.
    - ``scores_fp16``: FP16 [-1, 4] (a type Triton cannot classify).
    """
    scores = identity_graph(TensorProto.FLOAT, ["batch", 5])
    folder = write_model(repo, "scores", SCORES_CONFIG, scores)
    (folder / "labels.txt").write_text("\n".join(SCORES_LABELS) + "\n")
    write_model(repo, "scores_int", SCORES_INT_CONFIG, identity_graph(TensorProto.INT32, [6]))
    write_model(repo, "scores_fp16", None, identity_graph(TensorProto.FLOAT16, ["batch", 4]))
    return repo
