import numpy as np
import triton_python_backend_utils as pb_utils

from workbench.testing.shm_limit import limit_shm_from_config


class TritonPythonModel:
    """BLS in a stub that sees a small /dev/shm (as shm_limited: from initialize on, this
    process's ``os.posix_fallocate`` fails with ENOSPC over SHM_LIMIT_BYTES). Sends ELEMENTS
    FP32 zeros to ``identity`` with ``exec()``, ``exec(decoupled=True)`` and then a small
    request; ERRORS holds, per call, the BLS response's error text ("" when none) or, when a
    call raised, "raised: <exception>" (Triton's L0_backend_python bls_memory model expects
    an error response carrying "Failed to increase the shared memory pool size")."""

    def initialize(self, args):
        limit_shm_from_config(args)

    def _call(self, elements, decoupled):
        request = pb_utils.InferenceRequest(
            model_name="identity", requested_output_names=["OUTPUT0"],
            inputs=[pb_utils.Tensor("INPUT0", np.zeros(elements, np.float32))])
        try:
            if decoupled:
                responses = list(request.exec(decoupled=True))
                response = responses[0]
                if len(responses) != 1:
                    return f"{len(responses)} responses"
            else:
                response = request.exec()
        except Exception as exc:  # noqa: BLE001 - what the test reports
            return f"raised: {type(exc).__name__}: {exc}"
        return response.error().message() if response.has_error() else ""

    def execute(self, requests):
        responses = []
        for request in requests:
            elements = int(pb_utils.get_input_tensor_by_name(request, "ELEMENTS").as_numpy()[0])
            errors = [self._call(elements, False), self._call(elements, True), self._call(16, False)]
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("ERRORS", np.array(errors, dtype=np.object_))]))
        return responses
