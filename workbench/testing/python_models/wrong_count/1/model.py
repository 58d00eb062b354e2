import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns two responses for every batch, whatever its size."""

    def execute(self, requests):
        data = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)])] * (len(requests) + 1)
