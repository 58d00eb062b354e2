import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Writes ``initialize-<pid>`` / ``finalize-<pid>`` files into the MARKER_DIR parameter's
    folder; finalize first sleeps FINALIZE_SLEEP_S seconds. Execute echoes INPUT0."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.folder = parameters["MARKER_DIR"]["string_value"]
        self.finalize_sleep_s = float(parameters["FINALIZE_SLEEP_S"]["string_value"])
        self._mark("initialize", args["model_instance_name"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def finalize(self):
        time.sleep(self.finalize_sleep_s)
        self._mark("finalize", "done")

    def _mark(self, what, text):
        if self.folder:
            with open(os.path.join(self.folder, f"{what}-{os.getpid()}"), "w") as f:
                f.write(text)
