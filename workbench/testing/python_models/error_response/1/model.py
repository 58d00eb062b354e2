import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A negative input gets an error response (INVALID_ARG); the others their input back."""

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (data < 0).any():
                error = pb_utils.TritonError(
                    f"negative input {float(data.min())} is not allowed", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
