import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 (BYTES, as numpy object arrays of bytes); LENGTHS = byte length of each."""

    def execute(self, requests):
        responses = []
        for request in requests:
            strings = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            lengths = np.array([[len(s) for s in row] for row in strings], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", strings), pb_utils.Tensor("LENGTHS", lengths)]
                )
            )
        return responses
