import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 (BF16) through DLPack and torch, as Triton's identity_bf16 QA model:
    ``as_numpy()`` of a BF16 tensor must raise (numpy has no BF16)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            try:
                tensor.as_numpy()
            except pb_utils.TritonModelException as exc:
                assert "tensor dtype is bf16 and cannot be converted to numpy" in str(exc).lower()
            else:
                raise Exception("Expected BF16 conversion to numpy to fail")
            data = torch.utils.dlpack.from_dlpack(tensor.to_dlpack())
            assert data.dtype == torch.bfloat16
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", torch.utils.dlpack.to_dlpack(data * 2))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
