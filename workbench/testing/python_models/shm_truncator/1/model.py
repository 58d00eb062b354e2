import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Identity of INPUT0 that first truncates to 0 bytes the file named by TRUNCATE (when it
    exists): a client shrinking its output region while the request runs, after the server
    checked the region and before it writes the output there."""

    def execute(self, requests):
        responses = []
        for request in requests:
            path = pb_utils.get_input_tensor_by_name(request, "TRUNCATE").as_numpy().flatten()[0]
            path = path.decode() if isinstance(path, bytes) else str(path)
            if os.path.exists(path):
                os.truncate(path, 0)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
