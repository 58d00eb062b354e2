import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Async BLS (after Triton's async bls example): ``async def execute`` awaits
    ``async_exec`` of the model named by MODEL_NAME four times with ``asyncio.gather`` and
    returns OUTPUT0 / OUTPUT1 of the first; a BLS error becomes this request's error."""

    async def execute(self, requests):
        responses = []
        for request in requests:
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            infer_request = pb_utils.InferenceRequest(
                model_name=model_name.decode(),
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            )
            results = await asyncio.gather(*(infer_request.async_exec() for _ in range(4)))
            first = results[0]
            if first.has_error():
                responses.append(pb_utils.InferenceResponse(error=first.error()))
                continue
            expected = pb_utils.get_output_tensor_by_name(first, "OUTPUT0").as_numpy()
            if not all(
                np.array_equal(pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy(), expected)
                for r in results
            ):
                raise pb_utils.TritonModelException("concurrent BLS calls disagree")
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.get_output_tensor_by_name(first, n) for n in ("OUTPUT0", "OUTPUT1")]
                )
            )
        return responses
