"""The gRPC frontend."""
