import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """initialize raises: the model must be UNAVAILABLE with this reason."""

    def initialize(self, args):
        raise RuntimeError("cannot open weights file 'missing.bin'")

    def execute(self, requests):
        raise pb_utils.TritonModelException("never loaded")
