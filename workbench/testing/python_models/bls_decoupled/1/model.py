import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """BLS to a decoupled model (after Triton's bls_decoupled example): sends IN to 'repeat'
    with exec(decoupled=True), and returns the SUM of the OUT values and the COUNT of
    responses that carried outputs. The config parameter TARGET names another model."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.target = parameters.get("TARGET", {}).get("string_value", "repeat")

    def execute(self, requests):
        responses = []
        for request in requests:
            infer_request = pb_utils.InferenceRequest(
                model_name=self.target,
                requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
            )
            total, count, error = 0, 0, None
            for infer_response in infer_request.exec(decoupled=True):
                if infer_response.has_error():
                    error = infer_response.error()
                    break
                if len(infer_response.output_tensors()) > 0:
                    total += int(pb_utils.get_output_tensor_by_name(infer_response, "OUT").as_numpy()[0])
                    count += 1
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SUM", np.array([total], np.int32)),
                        pb_utils.Tensor("COUNT", np.array([count], np.int32)),
                    ]
                )
            )
        return responses
