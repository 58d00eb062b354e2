"""GPUs: device discovery, memory per model instance, NVML readings. No GPU is a normal answer."""
