import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Raises in execute: every request of the batch fails with the exception's text."""

    def execute(self, requests):
        value = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()[0]
        raise ValueError(f"cannot handle input {value}")
