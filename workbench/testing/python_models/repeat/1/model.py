import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled (after Triton's repeat example): one response per element of IN, sent from a
    thread after execute returned (OUT = IN[i], IDX = i), DELAY_MS apart; a negative element
    gets an error response. The request is then closed with the FINAL flag and no response."""

    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                f"the model `{args['model_name']}` can generate any number of responses per "
                "request, enable decoupled transaction policy in model configuration to serve it"
            )
        self.delay_s = float(model_config["parameters"]["DELAY_MS"]["string_value"]) / 1000
        self.out_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "OUT")["data_type"]
        )
        self.idx_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "IDX")["data_type"]
        )
        self.inflight = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            thread = threading.Thread(
                target=self.response_thread,
                args=(request.get_response_sender(), values.copy()),
                daemon=True,
            )
            with self.lock:
                self.inflight += 1
            thread.start()
        return None

    def response_thread(self, response_sender, values):
        for index, value in enumerate(values):
            time.sleep(self.delay_s)
            if value < 0:
                error = pb_utils.TritonError(f"negative value {value} at {index}")
                response_sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            out = pb_utils.Tensor("OUT", np.array([value], self.out_dtype))
            idx = pb_utils.Tensor("IDX", np.array([index], self.idx_dtype))
            response_sender.send(pb_utils.InferenceResponse(output_tensors=[out, idx]))
        response_sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with self.lock:
            self.inflight -= 1

    def finalize(self):
        while True:
            with self.lock:
                if self.inflight == 0:
                    return
            time.sleep(0.01)
