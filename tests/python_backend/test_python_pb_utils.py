"""``triton_python_backend_utils`` (pb_utils) and the stub transport, in-process.

pb_utils is the module Triton models import; here it is exercised directly (no stub)
for the parts that do not leave the process: tensors, DLPack, BYTES helpers, type maps,
responses, errors and the auto-complete ``ModelConfig`` setters.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import Any

import numpy as np
import pytest

from workbench.backends.python import pb_utils
from workbench.backends.python.transport import (
    INLINE_MAX_BYTES,
    Channel,
    ChannelClosed,
    SegmentPool,
    SegmentReader,
    decode_tensor,
    encode_tensor,
)
from workbench.testing.python_backend import python_backend_segments


# ----------------------------------------------------------------- tensors
def test_tensor_basics() -> None:
    tensor = pb_utils.Tensor("X", np.arange(6, dtype=np.float32).reshape(2, 3))
    assert tensor.name() == "X" and tensor.shape() == [2, 3] and tensor.is_cpu()
    assert tensor.triton_dtype() == 11 and tensor.as_numpy().dtype == np.float32


def test_tensor_refuses_numpy_str_arrays_and_converts_bytes_arrays() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"Please use np\.object_ instead"):
        pb_utils.Tensor("S", np.array(["a", "b"]))
    tensor = pb_utils.Tensor("B", np.array([b"a", b"bc"]))
    assert tensor.as_numpy().dtype == np.object_ and tensor.triton_dtype() == 13


def test_dlpack_round_trip_without_copy() -> None:
    data = np.arange(4, dtype=np.int64)
    from_capsule = pb_utils.Tensor.from_dlpack("C", pb_utils.Tensor("D", data).to_dlpack())
    from_object = pb_utils.Tensor.from_dlpack("O", data)
    assert np.shares_memory(from_capsule.as_numpy(), data)
    assert from_object.as_numpy().tolist() == [0, 1, 2, 3]
    assert np.from_dlpack(pb_utils.Tensor("T", data)).tolist() == [0, 1, 2, 3]
    with pytest.raises(pb_utils.TritonModelException, match="BYTES"):
        pb_utils.Tensor("S", np.array([b"x"], dtype=object)).to_dlpack()


def test_bytes_serialization_matches_tritons_encoding() -> None:
    strings = np.array([[b"ab", b""], ["\u00e9", b"\x00"]], dtype=object)
    encoded = pb_utils.serialize_byte_tensor(strings)
    assert encoded.dtype == np.object_ and encoded.shape == ()
    assert encoded.item() == b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x02\x00\x00\x00\xc3\xa9\x01\x00\x00\x00\x00"
    assert pb_utils.deserialize_bytes_tensor(encoded.item()).tolist() == [b"ab", b"", "\u00e9".encode(), b"\x00"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=object)).shape == (0,)


def test_type_maps() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(8) is np.int32 and pb_utils.triton_to_numpy_type(99) is None
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None


# ----------------------------------------------------------------- requests, responses, errors
def test_responses_and_errors() -> None:
    out = pb_utils.Tensor("OUT", np.ones(2, np.float32))
    response = pb_utils.InferenceResponse(output_tensors=[out], parameters={"k": 1})
    assert not response.has_error() and pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert pb_utils.get_output_tensor_by_name(response, "nope") is None
    assert json.loads(response.parameters()) == {"k": 1}
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    failed = pb_utils.InferenceResponse(error=error)
    carried = failed.error()
    assert failed.has_error() and carried is not None
    assert carried.message() == "bad" and carried.code() == 3
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    with pytest.raises(TypeError, match="'output_tensors' must be a list"):
        pb_utils.InferenceResponse(output_tensors=out)


NONE: Any = None  # typed Any: the cases pass values the signatures do not allow
ONE: Any = 1

def _request(**arguments):
    """``pb_utils.InferenceRequest`` of model "m" without requested outputs, and ``arguments``."""
    return pb_utils.InferenceRequest(**{"model_name": "m", "requested_output_names": [], **arguments})


# the cases of NVIDIA's qa/L0_backend_python/argument_validation (issue 33 cause 6): pybind11
# refuses a wrong type with TypeError, the C++ constructors a None tensor with their text
ARGUMENT_CASES = [
    (TypeError, lambda t: pb_utils.InferenceRequest(inputs=NONE, model_name="m", requested_output_names=[])),
    (TypeError, lambda t: pb_utils.InferenceRequest(model_name=NONE, inputs=[t], requested_output_names=[])),
    (TypeError, lambda t: pb_utils.InferenceRequest(requested_output_names=[NONE], inputs=[t], model_name="m")),
    (TypeError, lambda t: pb_utils.InferenceRequest(requested_output_names=NONE, inputs=[t], model_name="m")),
    (TypeError, lambda t: _request(inputs=[t], correlation_id=NONE)),
    (TypeError, lambda t: _request(inputs=[t], request_id=NONE)),
    (TypeError, lambda t: _request(inputs=[t], model_version=NONE)),
    (TypeError, lambda t: _request(inputs=[t], flags=NONE)),
    # a required argument missing (NVIDIA's bls model, test_bls_incorrect_args)
    (TypeError, lambda t: pb_utils.InferenceRequest(inputs=[], requested_output_names=["OUTPUT0"])),  # type: ignore[call-arg]
    (TypeError, lambda t: pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=["OUTPUT0"])),  # type: ignore[call-arg]
    (TypeError, lambda t: pb_utils.InferenceRequest(model_name="add_sub", inputs=[])),  # type: ignore[call-arg]
    (TypeError, lambda t: pb_utils.InferenceResponse(output_tensors=NONE)),
    (TypeError, lambda t: pb_utils.Tensor(NONE, np.zeros(2))),
    (TypeError, lambda t: pb_utils.Tensor("OUTPUT0", NONE)),
    (TypeError, lambda t: pb_utils.Tensor("", NONE)),
    (TypeError, lambda t: pb_utils.Logger.log("Invalid Level", NONE)),
    (TypeError, lambda t: pb_utils.Logger.log("Invalid Level", ONE)),
    (TypeError, lambda t: pb_utils.Logger.log_info(NONE)),
    (TypeError, lambda t: pb_utils.Logger.log_warn(NONE)),
    (TypeError, lambda t: pb_utils.Logger.log_error(NONE)),
    (TypeError, lambda t: pb_utils.Logger.log_verbose(NONE)),
    (pb_utils.TritonModelException, lambda t: _request(inputs=[NONE])),
    (pb_utils.TritonModelException, lambda t: pb_utils.InferenceResponse(output_tensors=[NONE])),
    (pb_utils.TritonModelException, lambda t: pb_utils.Tensor.from_dlpack("OUTPUT0", NONE)),
    (pb_utils.TritonModelException, lambda t: pb_utils.Tensor.from_dlpack("", NONE)),
]


@pytest.mark.parametrize("raised, call", ARGUMENT_CASES)
def test_bad_constructor_arguments_raise_tritons_exception_types(raised: type, call) -> None:
    with pytest.raises(raised) as caught:
        call(pb_utils.Tensor("INPUT0", np.asarray([1, 2], dtype=np.int32)))
    assert type(caught.value) is raised  # TritonModelException is no TypeError, nor the reverse


def test_good_constructor_arguments_and_log_levels() -> None:
    assert pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[]).correlation_id() == 0
    assert _request(inputs=[], correlation_id=5).correlation_id() == 5
    assert _request(inputs=[], correlation_id="s-5").correlation_id() == "s-5"
    assert pb_utils.InferenceResponse(output_tensors=[]).output_tensors() == []
    assert pb_utils.Logger.INFO is pb_utils.Logger.LogLevel.INFO and int(pb_utils.Logger.VERBOSE) == 3
    pb_utils.Logger.log("Level unspecified")
    with pytest.raises(pb_utils.TritonModelException, match=r"^Input tensor for request with id 'r' and "
                                                            r"model name 'm' should not be empty\.$"):
        _request(inputs=[None], request_id="r")


@pytest.mark.parametrize("parameters, text", [
    ([], "Expect dict, got <class 'list'>"),
    ({1: "int key"}, "Expect parameters keys to have type str, found type <class 'int'>"),
    ({"int": 2, "float": 0.5}, "Expect parameters values to have type bool/int/str, found type <class 'float'>"),
    ({"bool": True, "null": None}, "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>"),
    ({"list": ["variable"]}, "Expect parameters values to have type bool/int/str, found type <class 'list'>"),
])
def test_response_and_request_parameters_are_checked_with_tritons_texts(parameters, text: str) -> None:
    """NVIDIA's qa/L0_backend_python/parameters (response_parameters model) expectations."""
    for build in (lambda: pb_utils.InferenceResponse(parameters=parameters),
                  lambda: _request(inputs=[], parameters=parameters)):
        with pytest.raises(pb_utils.TritonModelException) as caught:
            build()
        assert str(caught.value) == text
    good = {"a": "1", "c": 3, "d": False, "f": ""}
    assert json.loads(pb_utils.InferenceResponse(parameters=good).parameters()) == good


def test_bls_and_senders_need_a_stub() -> None:
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=["O"], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match="only available inside a model's stub"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException, match="decoupled"):
        request.get_response_sender()
    assert request.parameters() == "{}" and request.model_version() == -1


def test_config_helpers() -> None:
    config = {"input": [{"name": "A", "data_type": "TYPE_FP32"}], "output": [{"name": "B"}],
              "model_transaction_policy": {"decoupled": True}}
    found = pb_utils.get_input_config_by_name(config, "A")
    assert found is not None and found["data_type"] == "TYPE_FP32"
    assert pb_utils.get_input_config_by_name(config, "Z") is None
    assert pb_utils.get_output_config_by_name(config, "B") == {"name": "B"}
    assert pb_utils.using_decoupled_model_transaction_policy(config)
    assert not pb_utils.using_decoupled_model_transaction_policy({})


# ----------------------------------------------------------------- auto-complete ModelConfig
def model_config(**fields) -> pb_utils.ModelConfig:
    return pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0, "input": [], "output": [], **fields}))


def test_model_config_setters() -> None:
    config = model_config()
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_model_transaction_policy({"decoupled": True})
    assert config.as_dict() == {
        "name": "m", "max_batch_size": 8, "dynamic_batching": {},
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
        "model_transaction_policy": {"decoupled": True},
    }


def test_model_config_setter_errors() -> None:
    with pytest.raises(ValueError, match="configuration specified max_batch_size 8"):
        model_config(max_batch_size=8).set_max_batch_size(4)
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        model_config(sequence_batching={}).set_dynamic_batching()
    existing = model_config(input=[{"name": "IN", "data_type": "TYPE_INT32", "dims": [4]}])
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_INT32 for input 'IN'"):
        existing.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(ValueError, match="the model expects dims \\[2\\]"):
        existing.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [2]})
    with pytest.raises(ValueError, match="missing 'dims' property"):
        model_config().add_output({"name": "OUT", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="property other than"):
        model_config().add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [1], "shape": [1]})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        model_config(model_transaction_policy={"decoupled": False}).set_model_transaction_policy({"decoupled": True})


# ----------------------------------------------------------------- transport
@pytest.fixture
def channels():
    left, right = socket.socketpair()
    a, b = Channel(left), Channel(right)
    yield a, b
    a.close()
    b.close()


def test_channel_frames_messages_from_several_threads(channels) -> None:
    sender, receiver = channels
    threads = [threading.Thread(target=lambda i=i: [sender.send({"t": i, "n": n, "pad": b"x" * 70_000})
                                                    for n in range(20)]) for i in range(4)]
    for thread in threads:
        thread.start()
    received = [receiver.recv() for _ in range(80)]
    for thread in threads:
        thread.join()
    for i in range(4):
        assert [m["n"] for m in received if m["t"] == i] == list(range(20))
    sender.close()
    with pytest.raises(ChannelClosed):
        receiver.recv()


PREFIX = f"triton_python_backend_shm_region_wb{os.getpid()}_test_"


@pytest.fixture
def pool():
    segments = SegmentPool(PREFIX)
    yield segments
    segments.close()
    assert python_backend_segments() == []


@pytest.mark.parametrize("size", [16, INLINE_MAX_BYTES // 4 + 1])
def test_tensors_inline_or_in_a_segment(pool: SegmentPool, size: int) -> None:
    reader = SegmentReader(PREFIX, writable=True)
    data = np.arange(size, dtype=np.float32).reshape(1, size)
    wire = encode_tensor("X", data, pool)
    assert isinstance(wire[3], bytes) == (data.nbytes <= INLINE_MAX_BYTES)
    name, array = decode_tensor(wire, reader)
    assert name == "X" and np.array_equal(array, data)
    array += 1  # models may write their inputs in place
    assert reader.released() == []
    del array
    assert reader.released() == ([] if data.nbytes <= INLINE_MAX_BYTES else [wire[3][0]])


def test_released_segments_are_reused(pool: SegmentPool) -> None:
    reader = SegmentReader(PREFIX, writable=False)
    data = np.ones(300_000, dtype=np.float32)
    first = encode_tensor("A", data, pool)
    _, kept = decode_tensor(first, reader)
    second = encode_tensor("B", data * 2, pool)  # the first segment is still in use
    assert second[3][0] != first[3][0] and kept.tolist()[:1] == [1.0]
    _, dropped = decode_tensor(second, reader)
    del dropped
    pool.release(reader.released())
    third = encode_tensor("C", data * 3, pool)
    assert third[3][0] == second[3][0]  # reused: no new shared memory
    assert decode_tensor(third, reader)[1][:2].tolist() == [3.0, 3.0] and kept[0] == 1.0
    assert len(python_backend_segments()) == 2


def test_idle_segments_beyond_the_limit_are_removed() -> None:
    small = SegmentPool(PREFIX, idle_limit_bytes=2**20)
    reader = SegmentReader(PREFIX, writable=False)
    wires = [encode_tensor("X", np.ones(2**20, np.uint8), small) for _ in range(3)]
    for wire in wires:
        decode_tensor(wire, reader)
    small.release(reader.released())
    assert len(python_backend_segments()) == 1
    small.close()
    assert python_backend_segments() == []


def test_bytes_tensor_through_a_segment_and_foreign_segments_refused(pool: SegmentPool) -> None:
    strings = np.array([b"x" * 2000] * 100, dtype=object).reshape(10, 10)
    wire = encode_tensor("S", strings, pool)
    with pytest.raises(ValueError, match="is not this stub's"):
        decode_tensor(wire, SegmentReader(PREFIX + "other", writable=False))
    reader = SegmentReader(PREFIX, writable=False)
    _, array = decode_tensor(wire, reader)
    assert array.shape == (10, 10) and array[3, 4] == b"x" * 2000
    assert reader.released() == [wire[3][0]]  # copied out: released at once


ZERO_DTYPES = [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16,
               np.int32, np.int64, np.float16, np.float32, np.float64, np.object_]


@pytest.mark.parametrize("dtype", ZERO_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(0,), (1, 0), (4, 0), (0, 3)])
def test_zero_element_tensors_cross_the_transport(pool: SegmentPool, dtype, shape) -> None:
    """Triton's python_backend passes empty tensors (a zero in the shape) in both directions."""
    array = np.zeros(shape, dtype=dtype)
    for writable in (True, False):  # into the stub (writable) and back to the server
        name, decoded = decode_tensor(encode_tensor("Z", array, pool), SegmentReader(PREFIX, writable))
        assert name == "Z" and decoded.shape == shape and decoded.dtype == array.dtype


def test_preferred_memory_is_accepted_by_a_bls_request() -> None:
    """NVIDIA's bls model builds ``pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU)``
    (test_preferred_memory); before, the attribute did not exist."""
    cpu = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU)
    gpu = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0)
    assert (cpu.preferred_memory_type, cpu.preferred_device_id) == (pb_utils.TRITONSERVER_MEMORY_CPU, 0)
    assert gpu.preferred_memory_type == pb_utils.TRITONSERVER_MEMORY_GPU
    assert _request(inputs=[], preferred_memory=cpu).model_name() == "m"
    with pytest.raises(TypeError):
        pb_utils.PreferredMemory(None)  # type: ignore[arg-type]


def test_a_received_request_has_every_attribute_the_constructor_sets() -> None:
    """The stub builds requests with ``InferenceRequest._received`` (no argument checks, per
    request on the hop): it must set exactly what ``__init__`` sets, or a later attribute of
    ``__init__`` would be missing on every request a model receives."""
    tensor = pb_utils.Tensor("INPUT0", np.zeros(2, np.float32))
    built = pb_utils.InferenceRequest("m", ["OUTPUT0"], [tensor], request_id="r")
    received = pb_utils.InferenceRequest._received("m", ["OUTPUT0"], [tensor], "r", 0, 0, 0, "{}", 1, True)
    assert set(vars(received)) == set(vars(built))
