import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Dynamic batching: execute gets one request per client request (each with its own
    batch dimension); REQUESTS tells each of them how many requests the batch held."""

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            count = np.full((data.shape[0], 1), len(requests), dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", data), pb_utils.Tensor("REQUESTS", count)]
                )
            )
        return responses
