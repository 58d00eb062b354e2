import json
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A NON-decoupled model that answers through its response sender, as Triton allows.

    The request parameter "mode" picks how: "return" (returns OUTPUT0 = INPUT0),
    "send_final" (sends INPUT0 + 1000 with the FINAL flag), "send_then_final" (sends
    INPUT0 + 1000, then the FINAL flag alone), "send_after_return" (a thread sends INPUT0 +
    2000 and FINAL after execute returned None), "send_and_return" (sends INPUT0 + 1000 with
    FINAL, then also returns a response: the batch fails, the sent response stands),
    "send_twice" (a second send raises), "final_only" (FINAL without a response raises).
    """

    def execute(self, requests):
        returned = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "return")
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            returned.append(None)
            if mode in ("return", "send_and_return"):
                returned[-1] = _response(data)
            if mode in ("send_final", "send_and_return"):
                sender.send(_response(data + 1000), flags=final)
            elif mode in ("send_then_final", "send_twice"):
                sender.send(_response(data + 1000))
                sender.send(_response(data + 1000) if mode == "send_twice" else None, flags=final)
            elif mode == "final_only":
                sender.send(flags=final)
            elif mode == "send_after_return":
                threading.Thread(target=_send_later, args=(sender, data)).start()
        return None if returned == [None] * len(requests) else returned


def _send_later(sender, data):
    sender.send(_response(data + 2000), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def _response(data):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)])
