"""Schedulers: queues between the engine and model instances (direct, batching, ...)."""
