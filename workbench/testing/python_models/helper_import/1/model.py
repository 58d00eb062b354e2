import triton_python_backend_utils as pb_utils
from helpers import triple


class TritonPythonModel:
    """OUTPUT0 = triple(INPUT0), with ``triple`` from helpers.py next to this file."""

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", triple(data))]))
        return responses
