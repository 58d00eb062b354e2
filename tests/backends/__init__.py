"""The backends (ONNX Runtime, PyTorch, OpenVINO, FIL, TensorFlow, TensorRT, DALI) and batch gather/split."""
