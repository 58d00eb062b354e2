import triton_python_backend_utils as pb_utils

from workbench.testing.shm_limit import limit_shm_from_config


class TritonPythonModel:
    """Identity (UINT8) in a stub that sees a small /dev/shm: from initialize on, this
    process's ``os.posix_fallocate`` fails with ENOSPC for a length over the config
    parameter SHM_LIMIT_BYTES, as tmpfs does for a range larger than the file system (what
    Triton's CI gets from ``docker --shm-size=1g`` for its 512 MiB / 1 GiB tensors)."""

    def initialize(self, args):
        limit_shm_from_config(args)

    def execute(self, requests):
        outputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]) for data in outputs]
