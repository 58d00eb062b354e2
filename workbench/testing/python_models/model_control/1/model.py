import json

import numpy as np
import triton_python_backend_utils as pb_utils


def run(call):
    """One model-control call described as JSON -> {"result": ..., "error": "<Type>: <text>"}."""
    call = json.loads(call)
    kind = call.pop("kind")
    if "files" in call and isinstance(call["files"], dict):
        call["files"] = {k: v.encode() for k, v in call["files"].items()}
    function = {"load": pb_utils.load_model, "unload": pb_utils.unload_model,
                "ready": pb_utils.is_model_ready}[kind]
    try:
        return {"result": function(**call), "error": None}
    except Exception as exc:  # noqa: BLE001 - the test reads the type and the text
        return {"result": None, "error": f"{type(exc).__name__}: {exc}"}


class TritonPythonModel:
    """Runs the pb_utils model-control call each request's CALL describes (JSON: kind "load" /
    "unload" / "ready" and the call's keyword arguments; "files" values as text) and answers
    it in ANSWER (JSON). Parameter ON_INITIALIZE: a list of such calls run in initialize,
    whose answers each ANSWER carries too ("initialize")."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        calls = config.get("parameters", {}).get("ON_INITIALIZE", {}).get("string_value", "[]")
        self.initialize_answers = [run(json.dumps(c)) for c in json.loads(calls)]

    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.get_input_tensor_by_name(request, "CALL").as_numpy()[0]
            answer = dict(run(call.decode()), initialize=self.initialize_answers)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("ANSWER", np.array([json.dumps(answer).encode()], dtype=np.object_))]))
        return responses
