"""A ModelInfer whose ``model_version`` is no integer is INVALID_ARGUMENT with Triton's text
(``common.cc`` GetModelVersionFromString: ``std::stol`` fails)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb


async def test_non_integral_version_string(server, stub_for) -> None:
    stub = await stub_for(server)
    a = np.ones((1, 16), np.float32)
    inputs = [pb.ModelInferRequest.InferInputTensor(name=f"INPUT{i}", datatype="FP32", shape=a.shape)
              for i in range(2)]
    request = pb.ModelInferRequest(model_name="add_sub", model_version="wrong_specification",
                                   inputs=inputs, raw_input_contents=[a.tobytes()] * 2)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "failed to get model version from specified version string 'wrong_specification' "
        "(details: stol), version should be an integral value > 0")
    request.model_version = "1"
    assert len((await stub.ModelInfer(request)).raw_output_contents) == 2
