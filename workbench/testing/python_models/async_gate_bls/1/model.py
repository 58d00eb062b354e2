import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled, ``async def execute``: forwards each request to ``async_gate`` with
    ``await async_exec(decoupled=True)`` and sends on each of its responses, iterating the
    response iterator right away (as NVIDIA's async_execute_decouple_bls model does)."""

    async def forward(self, request):
        call = pb_utils.InferenceRequest(
            model_name="async_gate", inputs=request.inputs(), requested_output_names=["ENTERED"])
        sender = request.get_response_sender()
        for response in await call.async_exec(decoupled=True):
            sender.send(response)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def execute(self, requests):
        await asyncio.gather(*(self.forward(request) for request in requests))
        return None
