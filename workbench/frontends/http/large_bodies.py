"""Big JSON infer bodies: bounded, and decoded and encoded off the event loop.

Parsing JSON tensors costs far more than the body: every number becomes a Python object
(about 32 bytes for ``0.123456,``, 9 bytes of text) before numpy packs it. So:

* the JSON part of a request (the whole body, or the ``Inference-Header-Content-Length``
  header of a binary one) is capped by ``--http-max-json-size`` and refused with 400 before
  the body is read when the headers announce it (:func:`check_json_size`), which bounds what
  one request may cost even when ``--http-max-input-size`` is raised for binary tensors;
* a JSON part of :data:`OFFLOAD_BYTES` or more is decoded on a worker thread, and an answer
  with that many bytes of JSON tensor data is encoded on one, so ``/v2/health/ready`` and
  small requests keep being served in between (:func:`decode_request_off_loop`,
  :func:`encode_response_off_loop`);
* those big decodes and encodes share a byte budget (:class:`JsonBudget`): at most
  ``budget`` bytes of JSON are being turned into objects at once, so N big requests at once
  wait for each other instead of multiplying the peak memory.

Triton has ``--http-max-input-size`` only; ``--http-max-json-size`` goes beyond it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from workbench import InferenceRequest, InferenceResponse, InvalidArgument
from workbench.frontends.http.codec import decode_request, encode_response_chunks, output_is_binary

#: JSON parts (and JSON answers) at least this large are handled on a worker thread
OFFLOAD_BYTES = 1024 * 1024


def json_part_size(header_length: str | None, body_length: int) -> int:
    """Bytes of JSON in a body: ``Inference-Header-Content-Length`` when it is a valid length
    (0 for a raw binary request, which has no JSON), else the whole body (a malformed header
    is the codec's error to raise)."""
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError:
            return body_length
        if 0 <= length <= body_length:
            return length
    return body_length


def check_json_size(size: int, limit: int) -> None:
    """Refuse a JSON part over ``limit`` bytes (``--http-max-json-size``).

    Raises:
        InvalidArgument: ``size > limit`` (HTTP 400).
    """
    if size > limit:
        raise InvalidArgument(
            f"JSON part of the request is {size} bytes, more than the {limit} bytes allowed "
            "(--http-max-json-size); send large tensors as binary data (the binary tensor data "
            "extension) or raise the limit"
        )


class JsonBudget:
    """How many bytes of JSON may be decoded or encoded at once on worker threads.

    A holder of more than the whole budget runs alone. FIFO among waiters is not promised.

    Args:
        capacity: bytes; at least one byte.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.held = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        """Wait until ``size`` bytes fit (or nothing else is held), hold them inside the block."""
        size = min(size, self.capacity)
        async with self._changed:
            await self._changed.wait_for(lambda: self.held + size <= self.capacity)
            self.held += size
        try:
            yield
        finally:
            async with self._changed:
                self.held -= size
                self._changed.notify_all()


async def decode_request_off_loop(
    budget: JsonBudget, body: bytes, header_length: str | None, model: str, version: str, size: int
) -> InferenceRequest:
    """:func:`~workbench.frontends.http.codec.decode_request` on a worker thread, holding
    ``size`` bytes (the JSON part, :func:`json_part_size`) of ``budget``. The caller decodes a
    JSON part under :data:`OFFLOAD_BYTES` inline itself (no coroutine on the hot path)."""
    async with budget.hold(size):
        return await asyncio.to_thread(decode_request, body, header_length, model, version)


async def encode_response_off_loop(
    budget: JsonBudget, response: InferenceResponse, request: InferenceRequest, size: int
) -> tuple[list[bytes | memoryview], int | None]:
    """:func:`~workbench.frontends.http.codec.encode_response_chunks` on a worker thread, holding
    ``size`` bytes (the JSON tensor data, :func:`json_output_bytes`) of ``budget``. The caller
    encodes an answer under :data:`OFFLOAD_BYTES` inline itself (binary and shared-memory
    outputs are views of their arrays: no copy)."""
    async with budget.hold(size):
        return await asyncio.to_thread(encode_response_chunks, response, request)


def json_output_bytes(response: InferenceResponse, request: InferenceRequest) -> int:
    """Tensor bytes of the outputs the codec writes as JSON (Triton's rule,
    :func:`~workbench.frontends.http.codec.output_is_binary`)."""
    binary = output_is_binary(request)
    return sum(
        tensor.data.nbytes for tensor in response.outputs
        if "shared_memory_region" not in tensor.parameters and not binary(tensor)
    )


__all__ = ["OFFLOAD_BYTES", "JsonBudget", "check_json_size", "decode_request_off_loop",
           "encode_response_off_loop", "json_output_bytes", "json_part_size"]
