import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """add_sub that sleeps SLEEP_MS per execution (whatever the batch size)."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.sleep_s = float(parameters["SLEEP_MS"]["string_value"]) / 1000

    def execute(self, requests):
        time.sleep(self.sleep_s)
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)])
            )
        return responses
