import json

# triton_python_backend_utils is available in every Triton Python model.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's add_sub example)."""

    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        self.args = args
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])
        pb_utils.Logger.log_info(f"add_sub initialized as {args['model_instance_name']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (
                in_0.as_numpy() + in_1.as_numpy(),
                in_0.as_numpy() - in_1.as_numpy(),
            )
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            info = {
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "parameters": json.loads(request.parameters()),
                "requested": sorted(request.requested_output_names()),
                "args": self.args,
            }
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[out_tensor_0, out_tensor_1],
                    parameters={"info": json.dumps(info)},
                )
            )
        return responses

    def finalize(self):
        print("Cleaning up...")
