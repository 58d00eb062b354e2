from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """BLS (after Triton's bls example): runs INPUT0/INPUT1 through the model named by
    MODEL_NAME, three times at once from three threads, and returns its OUTPUT0/OUTPUT1.
    A BLS error comes back as this request's error."""

    def initialize(self, args):
        self.pool = ThreadPoolExecutor(3)

    def execute(self, requests):
        responses = []
        for request in requests:
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            infer_request = pb_utils.InferenceRequest(
                model_name=model_name.decode(),
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            )
            results = list(self.pool.map(lambda same: same.exec(), [infer_request] * 3))
            first = results[0]
            if first.has_error():
                responses.append(pb_utils.InferenceResponse(error=first.error()))
                continue
            outputs = [pb_utils.get_output_tensor_by_name(first, n) for n in ("OUTPUT0", "OUTPUT1")]
            for other in results[1:]:
                again = pb_utils.get_output_tensor_by_name(other, "OUTPUT0").as_numpy()
                if not np.array_equal(again, outputs[0].as_numpy()):
                    raise pb_utils.TritonModelException("concurrent BLS calls disagree")
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self):
        self.pool.shutdown()
