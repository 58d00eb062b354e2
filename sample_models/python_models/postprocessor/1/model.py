"""``postprocessor``: ``LOGITS`` FP32 [batch, 3] -> ``PREDICTION`` FP32 [batch, 3], the softmax of
each row (class probabilities for negative, neutral, positive)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax over the last axis, computed in float64 after subtracting the row maximum
    (no overflow for large logits); returned as float32."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)


class TritonPythonModel:
    """Stateless: each request's rows are turned into probabilities independently."""

    def execute(self, requests):
        """One response per request."""
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            prediction = pb_utils.Tensor("PREDICTION", softmax(logits))
            responses.append(pb_utils.InferenceResponse(output_tensors=[prediction]))
        return responses
