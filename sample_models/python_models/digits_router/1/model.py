"""``digits_router``: business logic scripting (BLS) over ``digits_mlp``.

Input ``pixels`` FP32 [batch, 64]. Each request is sent on, whole, to the ``digits_mlp`` version
named by its request parameter ``digits_version`` (``"1"`` / ``"2"`` or 1 / 2; default: the highest
version in the config parameter ``digits_versions``) with a synchronous BLS call
(``pb_utils.InferenceRequest(...).exec()``). Outputs ``logits`` FP32 [batch, 10] as digits_mlp
returned them, and ``version_used`` INT32 [batch, 1].
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

TARGET_MODEL = "digits_mlp"
PARAMETER = "digits_version"


def parse_versions(model_config: dict) -> list[int]:
    """The digits_mlp versions the config allows (parameter ``digits_versions``, e.g. ``"1,2"``)."""
    text = model_config.get("parameters", {}).get("digits_versions", {}).get("string_value", "1,2")
    return sorted(int(v) for v in text.split(",") if v.strip())


def choose_version(parameters_json: str, allowed: list[int]) -> int:
    """The version a request asks for through its ``digits_version`` parameter, or the highest allowed.

    Args:
        parameters_json: ``request.parameters()``, a JSON object.
        allowed: the versions that may be asked for, ascending.

    Raises:
        ValueError: the parameter names no allowed version (the message is the client's error text).
    """
    parameters = json.loads(parameters_json or "{}")
    if PARAMETER not in parameters:
        return allowed[-1]
    value = parameters[PARAMETER]
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None or not text.isdigit() or int(text) not in allowed:
        choices = " or ".join(f'"{v}"' for v in allowed)
        raise ValueError(
            f"request parameter '{PARAMETER}' must be {choices} (or absent for version {allowed[-1]}); got {value!r}"
        )
    return int(text)


class TritonPythonModel:
    """Stateless router; one BLS call per request."""

    def initialize(self, args):
        """Read the allowed digits_mlp versions from the config."""
        self.model_config = json.loads(args["model_config"])
        self.versions = parse_versions(self.model_config)

    def execute(self, requests):
        """One response per request: digits_mlp's logits, or an error naming what went wrong."""
        responses = []
        for request in requests:
            try:
                version = choose_version(request.parameters(), self.versions)
            except ValueError as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            pixels = pb_utils.get_input_tensor_by_name(request, "pixels")
            bls_request = pb_utils.InferenceRequest(
                model_name=TARGET_MODEL,
                model_version=version,
                requested_output_names=["logits"],
                inputs=[pixels],
            )
            bls_response = bls_request.exec()
            if bls_response.has_error():
                error = pb_utils.TritonError(
                    f"{TARGET_MODEL} version {version} failed: {bls_response.error().message()}"
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            logits = pb_utils.get_output_tensor_by_name(bls_response, "logits")
            rows = logits.as_numpy().shape[0]
            version_used = pb_utils.Tensor("version_used", np.full((rows, 1), version, dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[logits, version_used]))
        return responses
