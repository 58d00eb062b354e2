"""Backends: load model files into model instances that execute batches of requests."""
