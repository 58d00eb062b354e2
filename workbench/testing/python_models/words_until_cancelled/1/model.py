import time

import numpy as np
import triton_python_backend_utils as pb_utils

#: the most words one request streams (10 ms each)
MAX_WORDS = 1000


class TritonPythonModel:
    """A decoupled text model that does not stop by itself: for a PROMPT it streams TEXT
    "w0 ", "w1 ", ... one word per 10 ms (at most ``MAX_WORDS``), checking
    ``request.is_cancelled()`` before each, and logs how it ended
    ("words_until_cancelled: cancelled at step N" or "... finished N steps")."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for step in range(MAX_WORDS):
                if request.is_cancelled():
                    pb_utils.Logger.log_info(f"words_until_cancelled: cancelled at step {step}")
                    break
                word = np.array([f"w{step} ".encode()], dtype=object)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", word)]))
                time.sleep(0.01)
            else:
                pb_utils.Logger.log_info(f"words_until_cancelled: finished {MAX_WORDS} steps")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
