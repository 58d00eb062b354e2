# Stand-in for Triton's C++ "identity" backend (written for this QA run):
# OUTPUT<i> = INPUT<i>, pairing inputs and outputs in config order.
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.pairs = list(zip([i["name"] for i in cfg["input"]],
                              [o["name"] for o in cfg["output"]], strict=False))

    def execute(self, requests):
        responses = []
        for request in requests:
            tensors = []
            for in_name, out_name in self.pairs:
                t = pb_utils.get_input_tensor_by_name(request, in_name)
                if t is not None:
                    tensors.append(pb_utils.Tensor(out_name, t.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
