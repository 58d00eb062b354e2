import asyncio
import contextlib
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled, ``async def execute``: each request waits until COUNT executes of its GROUP
    have entered (or TIMEOUT_S passed), then answers ENTERED (how many had entered) with the
    FINAL flag. A negative COUNT raises in the coroutine (after the wait) without answering."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.timeout_s = float(parameters["TIMEOUT_S"]["string_value"])
        self.entered = {}
        self.changed = None

    async def execute(self, requests):
        if self.changed is None:
            self.changed = asyncio.Condition()
        for request in requests:
            group = int(pb_utils.get_input_tensor_by_name(request, "GROUP").as_numpy()[0])
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            needed = abs(count)
            async with self.changed:
                self.entered[group] = self.entered.get(group, 0) + 1
                self.changed.notify_all()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(
                        self.changed.wait_for(lambda g=group, n=needed: self.entered[g] >= n), self.timeout_s)
            if count < 0:
                raise ValueError(f"COUNT cannot be negative: {count}")
            entered = pb_utils.Tensor("ENTERED", np.array([self.entered[group]], np.int32))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([entered]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
