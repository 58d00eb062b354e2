"""Requested-output parameter rules shared by the HTTP and gRPC codecs.

Triton validates the parameters of a requested output before running the request
(``ValidateOutputParameter`` in ``http_server.cc``, ``InferAllocatorPayload`` in the
gRPC ``infer_handler.h``): an output written into a shared-memory region cannot also
be a classification or (HTTP) a binary output.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench import InvalidArgument

SHARED_MEMORY_REGION = "shared_memory_region"


def check_shared_memory_output(
    params: dict, others: Iterable[str] = ("classification", "binary_data"), subject: str = "Output"
) -> None:
    """Refuse an output that names a shared-memory region and sets one of ``others``.

    Args:
        params: the output's parameters as plain Python values.
        others: the parameters that exclude shared memory (HTTP: classification and
            binary_data; gRPC: classification).
        subject: the first word of the message: ``"Output"`` over HTTP, ``"output"`` over
            gRPC (each protocol's Triton text).

    Raises:
        InvalidArgument: "<subject> can't set both 'shared_memory_region' and '<other>'".
    """
    if SHARED_MEMORY_REGION not in params:
        return
    for other in others:
        if params.get(other):
            raise InvalidArgument(f"{subject} can't set both '{SHARED_MEMORY_REGION}' and '{other}'")
