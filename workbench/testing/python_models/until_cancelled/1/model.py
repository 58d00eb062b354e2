import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

CANCELLED = pb_utils.TritonError("request has been cancelled", pb_utils.TritonError.CANCELLED)


class TritonPythonModel:
    """Works MAX steps of 10 ms, checking ``request.is_cancelled()`` before each, and logs how
    it ended ("until_cancelled: cancelled at step N (sender cancelled: B)" or "... finished N
    steps"). Decoupled (config ``model_transaction_policy``): sends OUT=step each step, then
    a CANCELLED error response (final) when cancelled. Otherwise answers OUT=MAX, or the
    CANCELLED error."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        responses = []
        for request in requests:
            steps = int(pb_utils.get_input_tensor_by_name(request, "MAX").as_numpy()[0])
            sender = request.get_response_sender()
            pb_utils.Logger.log_info("until_cancelled: started")
            response = None
            for step in range(steps):
                if request.is_cancelled():
                    pb_utils.Logger.log_info(
                        f"until_cancelled: cancelled at step {step} (sender cancelled: {sender.is_cancelled()})")
                    response = pb_utils.InferenceResponse(error=CANCELLED)
                    break
                if self.decoupled:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([step], np.int32))]))
                time.sleep(0.01)
            else:
                pb_utils.Logger.log_info(f"until_cancelled: finished {steps} steps")
                response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([steps], np.int32))])
            if self.decoupled:
                sender.send(response if response.has_error() else None,
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            responses.append(response)
        return None if self.decoupled else responses
