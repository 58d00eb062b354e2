"""The frontends: what HTTP and gRPC share, the OpenAI routes, the in-process ``tritonserver`` API."""
