import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Iterates one ``exec(decoupled=True)`` response iterator of 'repeat' several times, as
    Triton's L0_backend_python bls ``test_response_iterator`` does. COUNTS: responses a
    for-loop got after one ``next()``; a second and a third for-loop over the finished
    iterator (Triton replays every response); 1 when ``next()`` then raised StopIteration;
    responses a for-loop got after breaking off a fourth one after 2 and one ``next()``."""

    def execute(self, requests):
        responses = []
        for request in requests:
            infer_request = pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")])
            iterator = infer_request.exec(decoupled=True)
            next(iterator)
            counts = [sum(1 for _ in iterator), sum(1 for _ in iterator), sum(1 for _ in iterator)]
            try:
                next(iterator)
                counts.append(0)
            except StopIteration:
                counts.append(1)
            for index, _ in enumerate(iterator):
                if index == 1:
                    break
            next(iterator)
            counts.append(sum(1 for _ in iterator))
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("COUNTS", np.array(counts, np.int32))]))
        return responses
