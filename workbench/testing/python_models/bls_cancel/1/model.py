import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """NVIDIA's decoupled_bls_cancel, in short: streams the decoupled ``until_cancelled_stream``
    (up to 500 steps) through BLS, adds its OUT values until they reach MAX_SUM, then cancels
    the call and reads on to the end; answers the SUM and whether a CANCELLED error came."""

    def execute(self, requests):
        responses = []
        for request in requests:
            max_sum = int(pb_utils.get_input_tensor_by_name(request, "MAX_SUM").as_numpy()[0])
            call = pb_utils.InferenceRequest(
                model_name="until_cancelled_stream", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("MAX", np.array([500], np.int32))])
            stream = call.exec(decoupled=True)
            total, cancelled = 0, False
            for response in stream:
                if response.has_error():
                    cancelled = response.error().code() == pb_utils.TritonError.CANCELLED
                    break
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is None:
                    continue
                total += int(out.as_numpy()[0])
                if total >= max_sum:
                    stream.cancel()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([total], np.int32)),
                pb_utils.Tensor("IS_CANCELLED", np.array([cancelled], np.bool_))]))
        return responses
