import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """MODE 0: answer with the stub's pid; 1: os._exit(3); 2: SIGKILL itself; 3: hang 60 s."""

    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0])
        if mode == 1:
            os._exit(3)
        if mode == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == 3:
            time.sleep(60)
        pid = np.array([os.getpid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
