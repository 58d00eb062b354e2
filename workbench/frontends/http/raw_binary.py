"""Triton's raw binary request: ``Inference-Header-Content-Length: 0`` and no JSON at all.

The whole body is the data of the model's single input (Triton's ``EVBufferToRawInput`` in
``http_server.cc`` and ``InferenceRequest::Normalize`` in the core): its name and datatype
come from the config, its shape from the config's ``dims`` (with a batch dimension of 1 when
``max_batch_size > 0``), one ``-1`` dimension taken from the body's size. A BYTES input must
have dims ``[1]``: the body is then one string element. Every output is answered as binary
data (``binary_data_output``), as Triton does for such requests.
"""

from __future__ import annotations

from workbench import InferenceRequest, InvalidArgument, Server, tensor_from_buffer
from workbench.common.datatypes import WIRE_ITEMSIZE, config_to_wire


async def raw_binary_request(
    server: Server, body: bytes, model: str, version: str
) -> InferenceRequest:
    """The engine request for a raw binary body (every byte of it is the one input).

    Raises:
        ModelNotFound / ModelNotReady: unknown model or version, or none ready.
        InvalidArgument: the model has not exactly one input, its dims have more than one
            ``-1``, a BYTES input's dims are not ``[1]`` (Triton's texts), or the body does not
            fit the deduced shape (the engine's byte-size text).
    """
    config = await server.model_config(model, version)
    if len(config.input) != 1:
        raise InvalidArgument(
            "Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config.input)} inputs in '{model}' model configuration"
        )
    spec = config.input[0]
    datatype = config_to_wire(spec.data_type)
    shape = [1] if config.max_batch_size > 0 else []
    dynamic_axis, fixed_count = None, 1
    for dim in spec.dims:
        if dim == -1:
            if dynamic_axis is not None:
                raise InvalidArgument(
                    f"The shape of the raw input '{spec.name}' can not be deduced because there "
                    "are more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            fixed_count *= dim
        shape.append(dim)
    data: bytes | memoryview = body
    if datatype == "BYTES":
        if dynamic_axis is not None or fixed_count != 1:
            raise InvalidArgument(
                f"For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            )
        if len(body) > 0xFFFFFFFF:
            raise InvalidArgument(f"raw BYTES input '{spec.name}' exceeds 4 GiB, the longest "
                                  "string element the length prefix can describe")
        data = len(body).to_bytes(4, "little") + body  # one element, Triton's length prefix
    elif dynamic_axis is not None:
        shape[dynamic_axis] = len(body) // max(1, fixed_count * WIRE_ITEMSIZE[datatype])
    tensor = tensor_from_buffer(spec.name, datatype, shape, data, model=model)
    return InferenceRequest(
        model_name=model,
        model_version=version,
        inputs=[tensor],
        outputs=None,
        parameters={"binary_data_output": True},
    )


__all__ = ["raw_binary_request"]
