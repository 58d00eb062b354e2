import multiprocessing
import os

import numpy as np
import triton_python_backend_utils as pb_utils


def bls_in_worker(_):
    """In a forked worker: a BLS call (NVIDIA's bls test_multiprocess does this)."""
    request = pb_utils.InferenceRequest(
        model_name="forker", inputs=[pb_utils.Tensor("COUNT", np.array([0], np.int32))],
        requested_output_names=["STUB_PID"])
    response = request.exec()
    return os.getpid(), response.error().message() if response.has_error() else ""


class TritonPythonModel:
    """Starts a fork Pool of COUNT workers (kept open) and has each make a BLS call; answers the
    workers' pids, its own pid and the error the first BLS call answered. COUNT 0 answers at
    once (what the workers' BLS calls ask for)."""

    def initialize(self, args):
        self.pool = None

    def execute(self, requests):
        responses = []
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            results = []
            if count:
                self.pool = multiprocessing.get_context("fork").Pool(count)
                results = self.pool.map(bls_in_worker, range(count))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("WORKER_PIDS", np.array([pid for pid, _ in results], np.int64)),
                pb_utils.Tensor("STUB_PID", np.array([os.getpid()], np.int64)),
                pb_utils.Tensor("BLS_ERROR", np.array([results[0][1].encode() if results else b""], object)),
            ]))
        return responses
