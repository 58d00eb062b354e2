import json
import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """MODE 0: answer with the stub's pid; 1: os._exit(3); 2: SIGKILL itself; 3: hang 60 s;
    4: leave a shared-memory file named like the stub's own segments, then SIGKILL itself
    (what a crash in the middle of writing an output leaves behind). Any request of the
    batch asking for a crash crashes the whole batch. initialize fails while the file named by
    the FAIL_INIT_IF_EXISTS parameter exists (a restart that cannot succeed)."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        blocker = parameters.get("FAIL_INIT_IF_EXISTS", {}).get("string_value", "")
        if blocker and os.path.exists(blocker):
            raise pb_utils.TritonModelException(f"{blocker} exists")

    def execute(self, requests):
        modes = [int(pb_utils.get_input_tensor_by_name(r, "MODE").as_numpy().flatten()[0]) for r in requests]
        mode = max(modes)
        if mode == 1:
            os._exit(3)
        if mode == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == 3:
            time.sleep(60)
        if mode == 4:
            with open("/proc/self/cmdline", "rb") as cmdline:  # sys.argv is [''], as in Triton
                argv = cmdline.read().decode().split("\0")
            base = argv[argv.index("--segment-base") + 1]
            with open(f"/dev/shm/{base}s-left-behind", "wb") as f:
                f.write(b"x" * 4096)
            os.kill(os.getpid(), signal.SIGKILL)
        responses = []
        for request in requests:
            shape = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy().shape
            pid = np.full(shape, os.getpid(), dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return responses
